//! An owned packet buffer with headroom and tailroom, so that headers can be pushed in front of a packet and
//! trailers appended without copying the payload.

/// A fixed-capacity buffer holding one packet at `data()` = `storage[head..tail]`.
#[derive(Clone)]
pub struct PacketBuf {
    storage: Box<[u8]>,
    head: usize,
    tail: usize,
}

impl core::fmt::Debug for PacketBuf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PacketBuf")
            .field("capacity", &self.storage.len())
            .field("head", &self.head)
            .field("len", &self.len())
            .finish()
    }
}

impl PacketBuf {
    /// A buffer of `capacity` bytes whose (empty) packet starts `headroom` bytes in.
    pub fn new(capacity: usize, headroom: usize) -> Self {
        assert!(headroom <= capacity);
        PacketBuf {
            storage: vec![0u8; capacity].into_boxed_slice(),
            head: headroom,
            tail: headroom,
        }
    }

    /// A buffer holding a copy of `data` as its packet, with copies of `lead` in front of it and `trail` after it
    /// (as the packet lies among others, e.g. one datagram of several received at once).
    pub fn between(lead: &[u8], data: &[u8], trail: &[u8]) -> Self {
        let mut b = PacketBuf::new(lead.len() + data.len() + trail.len(), lead.len());
        b.storage[..lead.len()].copy_from_slice(lead);
        b.tail = lead.len() + data.len();
        b.storage[lead.len()..b.tail].copy_from_slice(data);
        b.storage[b.tail..].copy_from_slice(trail);
        b
    }

    /// A buffer holding a copy of `data` with the given head- and tailroom.
    pub fn from_slice(data: &[u8], headroom: usize, tailroom: usize) -> Self {
        let mut b = PacketBuf::new(headroom + data.len() + tailroom, headroom);
        b.tail = headroom + data.len();
        b.storage[headroom..b.tail].copy_from_slice(data);
        b
    }

    pub fn capacity(&self) -> usize {
        self.storage.len()
    }
    pub fn headroom(&self) -> usize {
        self.head
    }
    pub fn tailroom(&self) -> usize {
        self.storage.len() - self.tail
    }
    pub fn len(&self) -> usize {
        self.tail - self.head
    }
    pub fn is_empty(&self) -> bool {
        self.tail == self.head
    }
    pub fn data(&self) -> &[u8] {
        &self.storage[self.head..self.tail]
    }
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.head..self.tail]
    }

    /// The whole buffer, headroom and tailroom included: for packets that lie at known offsets in it (several
    /// received at once and opened where they lie), which offsets [`PacketBuf::headroom`] and
    /// [`PacketBuf::len`] give while each is the packet.
    pub fn storage(&self) -> &[u8] {
        &self.storage
    }
    pub fn storage_mut(&mut self) -> &mut [u8] {
        &mut self.storage
    }

    /// Empties the packet and places its start `headroom` bytes into the buffer.
    pub fn reset(&mut self, headroom: usize) {
        assert!(headroom <= self.storage.len());
        self.head = headroom;
        self.tail = headroom;
    }

    /// The free space after the packet, for a receive call to fill; follow with [`PacketBuf::set_len`].
    pub fn spare_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.head..]
    }

    /// Sets the packet length (after the caller wrote into [`PacketBuf::spare_mut`]). Panics past capacity.
    pub fn set_len(&mut self, len: usize) {
        assert!(self.head + len <= self.storage.len());
        self.tail = self.head + len;
    }

    /// Grows the packet by `n` bytes at the front and returns them; `None` if the headroom is too small.
    pub fn push_front(&mut self, n: usize) -> Option<&mut [u8]> {
        if n > self.head {
            return None;
        }
        self.head -= n;
        Some(&mut self.storage[self.head..self.head + n])
    }

    /// Removes `n` bytes from the front; `None` if the packet is shorter.
    pub fn pull_front(&mut self, n: usize) -> Option<()> {
        if n > self.len() {
            return None;
        }
        self.head += n;
        Some(())
    }

    /// Grows the packet by `n` bytes at the end and returns them; `None` if the tailroom is too small.
    pub fn push_back(&mut self, n: usize) -> Option<&mut [u8]> {
        if n > self.tailroom() {
            return None;
        }
        let start = self.tail;
        self.tail += n;
        Some(&mut self.storage[start..self.tail])
    }

    /// Shortens the packet to `len` bytes (no-op if already shorter).
    pub fn truncate(&mut self, len: usize) {
        if len < self.len() {
            self.tail = self.head + len;
        }
    }

    /// Moves the first `n` bytes of the packet `by` bytes toward the front (into the headroom), growing the packet
    /// at the front by `by`: used to open a gap after a header. `None` if headroom or length is too small.
    pub fn insert_gap(&mut self, at: usize, by: usize) -> Option<&mut [u8]> {
        if by > self.head || at > self.len() {
            return None;
        }
        let old = self.head;
        self.head -= by;
        self.storage.copy_within(old..old + at, self.head);
        Some(&mut self.storage[self.head + at..self.head + at + by])
    }

    /// Removes `n` bytes starting at offset `at` by moving the bytes before `at` forward.
    pub fn remove_gap(&mut self, at: usize, n: usize) -> Option<()> {
        if at + n > self.len() {
            return None;
        }
        let old = self.head;
        self.storage.copy_within(old..old + at, old + n);
        self.head += n;
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packet_between_others_lies_at_its_offsets() {
        let b = PacketBuf::between(&[1, 2], &[3, 4, 5], &[6]);
        assert_eq!((b.headroom(), b.len(), b.tailroom()), (2, 3, 1));
        assert_eq!(b.data(), &[3, 4, 5]);
        assert_eq!(b.storage(), &[1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn push_pull_and_gaps() {
        let mut b = PacketBuf::from_slice(&[1, 2, 3, 4], 8, 8);
        b.push_front(2).unwrap().copy_from_slice(&[9, 9]);
        assert_eq!(b.data(), &[9, 9, 1, 2, 3, 4]);
        b.push_back(1).unwrap()[0] = 7;
        assert_eq!(b.data(), &[9, 9, 1, 2, 3, 4, 7]);
        b.insert_gap(2, 3).unwrap().copy_from_slice(&[5, 5, 5]);
        assert_eq!(b.data(), &[9, 9, 5, 5, 5, 1, 2, 3, 4, 7]);
        b.remove_gap(2, 3).unwrap();
        assert_eq!(b.data(), &[9, 9, 1, 2, 3, 4, 7]);
        b.pull_front(2).unwrap();
        b.truncate(4);
        assert_eq!(b.data(), &[1, 2, 3, 4]);
        assert!(b.push_front(100).is_none());
        assert!(b.push_back(100).is_none());
        assert!(b.pull_front(5).is_none());
    }
}
