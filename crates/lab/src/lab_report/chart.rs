//! The two kinds of chart the figures are: horizontal bars and lines with dots, drawn with plotters as SVG text.

use plotters::prelude::*;

use crate::{Error, Result};

/// A figure's file name and the SVG text.
pub type Figure = (String, String);

fn plot_err<E: std::fmt::Display>(e: E) -> Error {
    Error::internal(format!("a figure could not be drawn: {e}"))
}

/// A horizontal bar chart: one bar per (name, value), and the paper's beside where there is one.
pub(super) struct Bars<'a> {
    pub(super) file: &'a str,
    pub(super) title: &'a str,
    pub(super) x_desc: &'a str,
    pub(super) paper_label: &'a str,
    pub(super) bars: Vec<(&'a str, f64, Option<f64>)>,
}

pub(super) fn bar_chart(f: Bars) -> Result<Option<Figure>> {
    let bars = f.bars;
    if bars.is_empty() {
        return Ok(None);
    }
    let ymax = bars
        .iter()
        .map(|b| b.1.max(b.2.unwrap_or(0.0)))
        .fold(0.0f64, f64::max)
        * 1.2;
    let n = bars.len() as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 520)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        // Horizontal bars: the paths' names read on the left.
        let mut chart = ChartBuilder::on(&root)
            .caption(f.title, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(380)
            .build_cartesian_2d(0f64..ymax.max(1.0), (0u32..n).into_segmented())
            .map_err(plot_err)?;
        let names: Vec<String> = bars.iter().map(|b| b.0.to_string()).collect();
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(bars.len())
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => names.get(*i as usize).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .y_label_style(("sans-serif", 14))
            .x_desc(f.x_desc)
            .draw()
            .map_err(plot_err)?;
        let ours = Palette99::pick(0).to_rgba();
        let paper = Palette99::pick(1).to_rgba();
        chart
            .draw_series(bars.iter().enumerate().map(|(i, b)| {
                let i = i as u32;
                Rectangle::new(
                    [
                        (0.0, SegmentValue::Exact(i)),
                        (b.1, SegmentValue::CenterOf(i)),
                    ],
                    ours.filled(),
                )
            }))
            .map_err(plot_err)?
            .label("measured")
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], ours.filled()));
        if bars.iter().any(|b| b.2.is_some()) {
            chart
                .draw_series(bars.iter().enumerate().filter_map(|(i, b)| {
                    let i = i as u32;
                    Some(Rectangle::new(
                        [
                            (0.0, SegmentValue::CenterOf(i)),
                            (b.2?, SegmentValue::Exact(i + 1)),
                        ],
                        paper.filled(),
                    ))
                }))
                .map_err(plot_err)?
                .label(f.paper_label)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 15, y + 5)], paper.filled())
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(plot_err)?;
        root.present().map_err(plot_err)?;
    }
    Ok(Some((f.file.into(), svg)))
}

/// A line chart, one line per series with a dot per point (x, value); every figure of lines is one of these.
pub(super) struct Lines<'a> {
    pub(super) file: &'a str,
    pub(super) title: &'a str,
    pub(super) x_desc: &'a str,
    pub(super) y_desc: &'a str,
    /// The y axis starts at 0 and reaches at least this.
    pub(super) y_min_top: f64,
    pub(super) x: XAxis,
    pub(super) legend: SeriesLabelPosition,
    pub(super) series: Vec<(String, Vec<(f64, f64)>)>,
}

/// What the x axis shows.
pub(super) enum XAxis {
    /// Numbers from 0 to `max` (payload sizes).
    Numeric { max: f64 },
    /// Named categories evenly spaced (loss levels, file sizes): a point's x is its category's index.
    Categories(Vec<String>),
}

pub(super) fn line_chart(f: Lines) -> Result<Option<Figure>> {
    if f.series.is_empty() {
        return Ok(None);
    }
    let ymax = f
        .series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|x| x.1))
        .fold(f.y_min_top, f64::max)
        * 1.1;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 560)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(f.title, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(65)
            .build_cartesian_2d(
                match &f.x {
                    XAxis::Numeric { max } => 0.0..*max,
                    XAxis::Categories(c) => -0.3f64..c.len() as f64 - 0.7,
                },
                0f64..ymax,
            )
            .map_err(plot_err)?;
        let (labels, n_labels): (&[String], usize) = match &f.x {
            XAxis::Numeric { .. } => (&[], 10),
            XAxis::Categories(c) => (c, c.len()),
        };
        let numeric = matches!(f.x, XAxis::Numeric { .. });
        chart
            .configure_mesh()
            .x_labels(n_labels)
            .x_label_formatter(&|x| {
                if numeric {
                    return format!("{x:.0}");
                }
                // Only at a category's position (the mesh may place labels between them).
                let i = x.round();
                if (x - i).abs() > 0.05 || i < 0.0 {
                    return String::new();
                }
                labels.get(i as usize).cloned().unwrap_or_default()
            })
            .x_desc(f.x_desc)
            .y_desc(f.y_desc)
            .draw()
            .map_err(plot_err)?;
        for (i, (name, mut pts)) in f.series.into_iter().enumerate() {
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(plot_err)?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(plot_err)?;
        }
        chart
            .configure_series_labels()
            .position(f.legend)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .draw()
            .map_err(plot_err)?;
        root.present().map_err(plot_err)?;
    }
    Ok(Some((f.file.into(), svg)))
}
