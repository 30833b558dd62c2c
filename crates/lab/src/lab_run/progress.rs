//! `netveil lab`'s progress: a bar over the run's experiments on the terminal (standard error; indicatif hides it
//! when standard error is not a terminal), with the time elapsed and the path being measured, and the lab's
//! running notes ("loss: netveil psp aes-gcm-128") printed above it. Without a terminal the notes go to standard
//! output as lines, as before.

use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

static BAR: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// Prints a running note: above the bar while one is shown, else as a line on standard output.
#[macro_export]
macro_rules! say {
    ($($t:tt)*) => {
        $crate::lab_run::progress::note(format!($($t)*))
    };
}

fn bar() -> std::sync::MutexGuard<'static, Option<ProgressBar>> {
    BAR.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts the bar over `experiments` experiments.
pub fn start(experiments: u64) {
    let pb = ProgressBar::new(experiments);
    let style = ProgressStyle::with_template(
        "{elapsed_precise} [{bar:30.cyan/blue}] {pos}/{len} experiments  {wide_msg}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ");
    pb.set_style(style);
    pb.enable_steady_tick(Duration::from_millis(200));
    *bar() = Some(pb);
}

/// A running note: what the lab is measuring now.
pub fn note(msg: String) {
    match bar().as_ref() {
        Some(pb) if !pb.is_hidden() => {
            pb.set_message(msg.clone());
            pb.println(msg);
        }
        _ => println!("{msg}"),
    }
}

/// One more experiment done.
pub fn advance() {
    if let Some(pb) = bar().as_ref() {
        pb.inc(1);
    }
}

/// Removes the bar (before the report is printed).
pub fn finish() {
    if let Some(pb) = bar().take() {
        pb.finish_and_clear();
    }
}
