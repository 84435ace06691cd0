//! The perf mmap ring buffer.
//!
//! The kernel writes records into a power-of-two byte ring that follows one
//! metadata page (`struct perf_event_mmap_page`). `data_head` and
//! `data_tail` are free-running byte counters: the readable bytes are
//! `[tail, head)`, each at position `counter % size`. A record (8-byte
//! `perf_event_header` + body, `size` a multiple of 8) may wrap around the
//! end of the ring; so may its header.
//!
//! The pure part ([`readable_segments`], [`for_each_record_in`],
//! [`for_each_record`]) takes bytes and counters and is what the unit tests
//! drive with synthetic rings. [`MappedRing`] is the live mapping: it reads
//! `data_head` with Acquire ordering, hands out only the bytes the kernel
//! has published and will not touch until we move `data_tail`, and stores
//! `data_tail` with Release ordering once the records are consumed.

use crate::sys;
use std::io;
use std::ops::Range;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// The ring's counters make no sense: the kernel and the reader disagree.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    /// `head - tail` exceeds the ring size.
    #[error("ring head {head} is more than the ring's {size} bytes ahead of tail {tail}")]
    Overrun { tail: u64, head: u64, size: usize },
    /// A header announces fewer than 8 bytes.
    #[error(
        "record header at ring position {pos} has size {size}, smaller than the 8-byte header"
    )]
    ShortRecord { pos: u64, size: u16 },
    /// A header announces more bytes than were published.
    #[error("record at ring position {pos} claims {size} bytes but only {available} are readable")]
    Truncated { pos: u64, size: u16, available: u64 },
}

/// The readable bytes `[tail, head)` of a ring of `size` bytes (a power of
/// two) as at most two ranges of the data area: up to the end of the ring,
/// then from its start.
pub fn readable_segments(
    size: usize,
    tail: u64,
    head: u64,
) -> Result<(Range<usize>, Range<usize>), RingError> {
    debug_assert!(size.is_power_of_two());
    let avail = head.wrapping_sub(tail);
    if avail > size as u64 {
        return Err(RingError::Overrun { tail, head, size });
    }
    let avail = avail as usize;
    let start = (tail & (size as u64 - 1)) as usize;
    let first_len = avail.min(size - start);
    Ok((start..start + first_len, 0..avail - first_len))
}

/// Copy `out.len()` bytes starting at `pos` of the concatenation
/// `first ++ second`. The caller has checked the bounds.
fn copy_out(first: &[u8], second: &[u8], pos: usize, out: &mut [u8]) {
    let mut n = 0;
    if pos < first.len() {
        n = (first.len() - pos).min(out.len());
        out[..n].copy_from_slice(&first[pos..pos + n]);
        if n == out.len() {
            return;
        }
    }
    let from = pos + n - first.len();
    let rest = out.len() - n;
    out[n..].copy_from_slice(&second[from..from + rest]);
}

/// Call `f` with each whole record in the readable bytes `first ++ second`
/// (as [`readable_segments`] cuts them; `start` is the tail counter, only
/// used in error positions). A record contiguous in memory is passed in
/// place; one split across the wrap point is copied into `scratch` first.
///
/// Returns the number of bytes consumed (always everything, on success). On
/// error, the records before the bad header have been passed to `f` and the
/// error says where the ring stopped making sense.
pub fn for_each_record_in(
    first: &[u8],
    second: &[u8],
    start: u64,
    scratch: &mut Vec<u8>,
    mut f: impl FnMut(&[u8]),
) -> Result<u64, RingError> {
    let total = first.len() + second.len();
    let mut pos = 0usize;
    while pos < total {
        let avail = total - pos;
        let at = start.wrapping_add(pos as u64);
        if avail < 8 {
            return Err(RingError::Truncated {
                pos: at,
                size: 8,
                available: avail as u64,
            });
        }
        let mut header = [0u8; 8];
        copy_out(first, second, pos, &mut header);
        let size = u16::from_ne_bytes([header[6], header[7]]);
        if size < 8 {
            return Err(RingError::ShortRecord { pos: at, size });
        }
        let len = usize::from(size);
        if len > avail {
            return Err(RingError::Truncated {
                pos: at,
                size,
                available: avail as u64,
            });
        }
        if pos + len <= first.len() {
            f(&first[pos..pos + len]);
        } else if pos >= first.len() {
            let p = pos - first.len();
            f(&second[p..p + len]);
        } else {
            scratch.clear();
            scratch.resize(len, 0);
            copy_out(first, second, pos, scratch);
            f(scratch);
        }
        pos += len;
    }
    Ok(total as u64)
}

/// Call `f` with each record readable in `ring` (the whole data area, a
/// power of two in length) between the counters `tail` and `head`; returns
/// the new tail.
///
/// ```
/// use profdev_sample::ring::for_each_record;
/// // A 16-byte ring holding one 16-byte record that starts at offset 8,
/// // so it wraps: header at 8..16, body at 0..8.
/// let mut ring = [0u8; 16];
/// ring[8..16].copy_from_slice(&[9, 0, 0, 0, 1, 0, 16, 0]); // type 9, misc 1, size 16
/// ring[0..8].copy_from_slice(&42u64.to_ne_bytes());
/// let mut seen = Vec::new();
/// let tail = for_each_record(&ring, 8, 24, &mut Vec::new(), |r| seen.push(r.to_vec())).unwrap();
/// assert_eq!(tail, 24);
/// assert_eq!(seen[0][8..], 42u64.to_ne_bytes());
/// ```
pub fn for_each_record(
    ring: &[u8],
    tail: u64,
    head: u64,
    scratch: &mut Vec<u8>,
    f: impl FnMut(&[u8]),
) -> Result<u64, RingError> {
    let (a, b) = readable_segments(ring.len(), tail, head)?;
    let n = for_each_record_in(&ring[a], &ring[b], tail, scratch, f)?;
    Ok(tail.wrapping_add(n))
}

/// One event's live ring: 1 metadata page + 2^n data pages, mapped
/// read-write so the kernel honours `data_tail` (it never overwrites bytes
/// we have not consumed; it counts them lost instead).
pub struct MappedRing {
    base: *mut u8,
    map_len: usize,
    data_offset: usize,
    data_size: usize,
}

// SAFETY: the mapping is owned exclusively by this value (nothing else holds
// `base`), and all access goes through `&mut self` or atomics, so moving it
// to another thread is sound.
unsafe impl Send for MappedRing {}

impl MappedRing {
    /// Map `data_pages` (a power of two) data pages plus the metadata page
    /// of the perf event `fd`.
    pub fn map(fd: &OwnedFd, data_pages: usize) -> io::Result<MappedRing> {
        assert!(data_pages.is_power_of_two());
        let page = sys::page_size();
        let map_len = page * (1 + data_pages);
        // SAFETY: a fresh shared mapping of a perf event descriptor at an
        // address the kernel chooses; it aliases no Rust object. Failure is
        // checked below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut ring = MappedRing {
            base: ptr.cast(),
            map_len,
            data_offset: page,
            data_size: page * data_pages,
        };
        // Kernels since 4.1 say where the data area is; older ones leave 0.
        let (off, size) = (
            ring.meta(sys::mmap_page::DATA_OFFSET)
                .load(Ordering::Relaxed),
            ring.meta(sys::mmap_page::DATA_SIZE).load(Ordering::Relaxed),
        );
        if size != 0 && size.is_power_of_two() && off as usize + size as usize <= map_len {
            ring.data_offset = off as usize;
            ring.data_size = size as usize;
        }
        Ok(ring)
    }

    fn meta(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset + 8 <= self.data_offset && offset % 8 == 0);
        // SAFETY: `offset` lies inside the metadata page, which is mapped for
        // as long as `self` lives; it is 8-aligned (page base + multiple of
        // 8); the kernel and we only access these words as 64-bit atomics.
        unsafe { &*(self.base.add(offset) as *const AtomicU64) }
    }

    /// Size of the data area in bytes.
    pub fn data_size(&self) -> usize {
        self.data_size
    }

    /// The kernel's `data_head`, read with Acquire ordering so the record
    /// bytes it covers are visible to us.
    pub fn head(&self) -> u64 {
        self.meta(sys::mmap_page::DATA_HEAD).load(Ordering::Acquire)
    }

    /// Our `data_tail`.
    pub fn tail(&self) -> u64 {
        self.meta(sys::mmap_page::DATA_TAIL).load(Ordering::Relaxed)
    }

    /// Pass every record in `[tail, head)` to `f`, then release those bytes
    /// to the kernel. `head` must come from [`head`](Self::head). On a ring
    /// error the bytes are released all the same (the reader resynchronises
    /// at `head`) and the error is returned.
    pub fn consume(
        &mut self,
        head: u64,
        scratch: &mut Vec<u8>,
        f: impl FnMut(&[u8]),
    ) -> Result<(), RingError> {
        let tail = self.tail();
        let result = match readable_segments(self.data_size, tail, head) {
            Ok((a, b)) => {
                // SAFETY: both ranges lie inside the data area (readable_segments
                // keeps them below data_size), which stays mapped while
                // `self` is borrowed. In non-overwrite mode the kernel never
                // writes into [data_tail, data_head) until we advance
                // data_tail, and the Acquire load of data_head made its
                // writes of those bytes visible, so nobody mutates them while
                // the slices live.
                let (first, second) = unsafe {
                    let data = self.base.add(self.data_offset);
                    (
                        std::slice::from_raw_parts(data.add(a.start), a.len()),
                        std::slice::from_raw_parts(data.add(b.start), b.len()),
                    )
                };
                for_each_record_in(first, second, tail, scratch, f).map(|_| ())
            }
            Err(e) => Err(e),
        };
        // Release: our reads of the records happen before the kernel may
        // reuse their bytes.
        self.meta(sys::mmap_page::DATA_TAIL)
            .store(head, Ordering::Release);
        result
    }
}

impl Drop for MappedRing {
    fn drop(&mut self) {
        // SAFETY: `base`/`map_len` are exactly what mmap returned, and no
        // reference into the mapping outlives `self`.
        unsafe {
            libc::munmap(self.base.cast(), self.map_len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record of `ty` whose body is `words` (so size = 8 + 8 * words).
    fn rec(ty: u32, words: &[u64]) -> Vec<u8> {
        let size = 8 + 8 * words.len();
        let mut v = Vec::with_capacity(size);
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(&0u16.to_ne_bytes());
        v.extend_from_slice(&(size as u16).to_ne_bytes());
        for w in words {
            v.extend_from_slice(&w.to_ne_bytes());
        }
        v
    }

    /// Write `bytes` into the ring starting at counter `at`, wrapping.
    fn put(ring: &mut [u8], at: u64, bytes: &[u8]) {
        let n = ring.len() as u64;
        for (i, b) in bytes.iter().enumerate() {
            ring[((at + i as u64) % n) as usize] = *b;
        }
    }

    fn collect(ring: &[u8], tail: u64, head: u64) -> Result<(u64, Vec<Vec<u8>>), RingError> {
        let mut out = Vec::new();
        let mut scratch = Vec::new();
        let t = for_each_record(ring, tail, head, &mut scratch, |r| out.push(r.to_vec()))?;
        Ok((t, out))
    }

    #[test]
    fn segments() {
        assert_eq!(readable_segments(64, 0, 0).unwrap(), (0..0, 0..0));
        assert_eq!(readable_segments(64, 8, 40).unwrap(), (8..40, 0..0));
        assert_eq!(readable_segments(64, 56, 72).unwrap(), (56..64, 0..8));
        // free-running counters far past the size
        assert_eq!(
            readable_segments(64, 640 + 48, 640 + 64 + 16).unwrap(),
            (48..64, 0..16)
        );
        assert_eq!(readable_segments(64, 0, 64).unwrap(), (0..64, 0..0));
        assert_eq!(
            readable_segments(64, 0, 65),
            Err(RingError::Overrun {
                tail: 0,
                head: 65,
                size: 64
            })
        );
        // counters wrapping u64
        let t = u64::MAX - 7;
        assert_eq!(
            readable_segments(64, t, t.wrapping_add(16)).unwrap(),
            (56..64, 0..8)
        );
    }

    #[test]
    fn contiguous_records() {
        let mut ring = vec![0u8; 64];
        let a = rec(9, &[1, 2]);
        let b = rec(3, &[7]);
        put(&mut ring, 0, &a);
        put(&mut ring, 24, &b);
        let (tail, out) = collect(&ring, 0, 40).unwrap();
        assert_eq!(tail, 40);
        assert_eq!(out, vec![a, b]);
    }

    #[test]
    fn record_split_across_wrap() {
        // 64-byte ring; a 32-byte record starting at 48 has 16 bytes before
        // the end and 16 after the wrap.
        let mut ring = vec![0xAAu8; 64];
        let first = rec(2, &[5, 6]); // 24 bytes at 24..48
        let split = rec(9, &[10, 11, 12]); // 32 bytes at 48..80
        put(&mut ring, 64 + 24, &first);
        put(&mut ring, 64 + 48, &split);
        let (tail, out) = collect(&ring, 64 + 24, 64 + 80).unwrap();
        assert_eq!(tail, 144);
        assert_eq!(out, vec![first, split]);
    }

    #[test]
    fn header_split_across_wrap() {
        // The 8-byte header itself starts 4 bytes before the end.
        let mut ring = vec![0u8; 64];
        let r = rec(10, &[0x1122334455667788, 0x99]);
        put(&mut ring, 60, &r);
        let (tail, out) = collect(&ring, 60, 60 + r.len() as u64).unwrap();
        assert_eq!(tail, 84);
        assert_eq!(out, vec![r]);
    }

    #[test]
    fn record_starting_exactly_at_wrap() {
        let mut ring = vec![0u8; 32];
        let a = rec(1, &[1, 2, 3]); // 32 bytes fill the ring
        put(&mut ring, 32, &a);
        let (_, out) = collect(&ring, 32, 64).unwrap();
        assert_eq!(out, vec![a]);
        let b = rec(4, &[9]);
        put(&mut ring, 64, &b);
        let (tail, out) = collect(&ring, 64, 80).unwrap();
        assert_eq!((tail, out), (80, vec![b]));
    }

    #[test]
    fn bad_headers_are_errors() {
        let mut ring = vec![0u8; 64];
        put(&mut ring, 0, &rec(9, &[1]));
        // second header says size 4
        put(&mut ring, 16, &[9, 0, 0, 0, 0, 0, 4, 0]);
        let mut seen = 0;
        let err = for_each_record(&ring, 0, 24, &mut Vec::new(), |_| seen += 1).unwrap_err();
        assert_eq!(seen, 1);
        assert_eq!(err, RingError::ShortRecord { pos: 16, size: 4 });
        // size larger than what was published
        put(&mut ring, 16, &rec(9, &[1, 2, 3]));
        let err = collect(&ring, 0, 24).unwrap_err();
        assert_eq!(
            err,
            RingError::Truncated {
                pos: 16,
                size: 32,
                available: 8
            }
        );
        // fewer than 8 bytes left
        let err = collect(&ring, 0, 20).unwrap_err();
        assert_eq!(
            err,
            RingError::Truncated {
                pos: 16,
                size: 8,
                available: 4
            }
        );
    }
}
