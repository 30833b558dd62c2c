//! Bounds-checked reading and writing of big-endian fields: every access that could run past a slice returns an
//! error instead of panicking.

use super::error::Error;

/// Reads fields from the front of a slice.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    /// `what` names the structure being read, for [`Error::Truncated`].
    pub(crate) fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader { buf, what }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        if n > self.buf.len() {
            return Err(Error::Truncated { what: self.what });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    pub(crate) fn rest(&mut self) -> &'a [u8] {
        core::mem::take(&mut self.buf)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, Error> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16, Error> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
}

/// Writes fields to the front of a mutable slice.
pub(crate) struct Writer<'a> {
    buf: &'a mut [u8],
    at: usize,
}

impl<'a> Writer<'a> {
    pub(crate) fn new(buf: &'a mut [u8]) -> Self {
        Writer { buf, at: 0 }
    }

    /// Bytes written so far.
    pub(crate) fn written(&self) -> usize {
        self.at
    }

    pub(crate) fn bytes(&mut self, b: &[u8]) -> Result<(), Error> {
        let end = self.at.checked_add(b.len()).ok_or(Error::BufferTooSmall)?;
        self.buf
            .get_mut(self.at..end)
            .ok_or(Error::BufferTooSmall)?
            .copy_from_slice(b);
        self.at = end;
        Ok(())
    }

    pub(crate) fn u8(&mut self, v: u8) -> Result<(), Error> {
        self.bytes(&[v])
    }

    pub(crate) fn u16(&mut self, v: u16) -> Result<(), Error> {
        self.bytes(&v.to_be_bytes())
    }

    pub(crate) fn u32(&mut self, v: u32) -> Result<(), Error> {
        self.bytes(&v.to_be_bytes())
    }

    pub(crate) fn zeros(&mut self, n: usize) -> Result<(), Error> {
        for _ in 0..n {
            self.u8(0)?;
        }
        Ok(())
    }

    /// The not yet written part, for a nested structure; `advance` by what it wrote.
    pub(crate) fn tail(&mut self) -> &mut [u8] {
        let at = self.at.min(self.buf.len());
        &mut self.buf[at..]
    }

    pub(crate) fn advance(&mut self, n: usize) -> Result<(), Error> {
        let end = self.at.checked_add(n).ok_or(Error::BufferTooSmall)?;
        if end > self.buf.len() {
            return Err(Error::BufferTooSmall);
        }
        self.at = end;
        Ok(())
    }
}

/// A length as a 16-bit field, or [`Error::TooLong`] naming `what`.
pub(crate) fn len16(n: usize, what: &'static str) -> Result<u16, Error> {
    u16::try_from(n).map_err(|_| Error::TooLong { what })
}
