//! Entry points of the fuzz targets in `fuzz/` (cargo fuzz), shared with
//! the replay test that runs the committed corpus under `cargo test`.

use crate::scan::{self, Limits, Memory, ThreadRoots};
use profdev_symbolize::maps::MapsEntry;

/// A process image: (start, bytes) regions.
struct Image(Vec<(u64, Vec<u8>)>);

impl Memory for Image {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        self.0.iter().any(|(s, b)| {
            let Some(off) = addr.checked_sub(*s) else {
                return false;
            };
            let Some(src) = b.get(off as usize..).and_then(|r| r.get(..buf.len())) else {
                return false;
            };
            buf.copy_from_slice(src);
            true
        })
    }
}

const LIBC: u64 = 0x7f00_0000_0000;
const ARENA: u64 = LIBC + 0x100;
const HEAP: u64 = 0x5555_0000_0000;
const MMAP: u64 = 0x7f10_0000_0000;
const STACK: u64 = 0x7ffd_0000_0000;

fn word(data: &[u8], i: usize) -> u64 {
    let mut b = [0u8; 8];
    if let Some(s) = data.get(8 * i..8 * i + 8) {
        b.copy_from_slice(s);
    }
    u64::from_le_bytes(b)
}

/// `fuzz_targets/heap_scan.rs`: a hostile heap. The input's first words
/// are main_arena's top, a fastbin head and its `next` (each an offset
/// into the heap, or taken as it is when its top bit is set), an mmapped
/// chunk's header and the thread's registers; the rest is the heap's
/// bytes (at most 64 KiB). The scan must end, within its bounds, with a
/// result or an error, never a panic or a loop.
pub fn heap_scan(data: &[u8]) {
    let limits = Limits { max_bytes: 1 << 20 };
    if let Ok(s) = heap_image_scan(data, limits) {
        let heap = data
            .len()
            .saturating_sub(64)
            .min(64 << 10)
            .div_ceil(4096)
            .max(1)
            * 4096;
        assert!(
            s.blocks <= heap as u64 / 32 + 2,
            "more blocks than the heap holds"
        );
        assert!(s.unreachable.len() as u64 <= s.blocks);
        assert!(s.read_bytes <= limits.max_bytes);
    }
}

/// [`heap_scan`]'s image of `data`, scanned.
fn heap_image_scan(data: &[u8], limits: Limits) -> Result<scan::Scan, scan::ScanError> {
    let heap = data.get(64..).unwrap_or_default();
    let mut heap = heap[..heap.len().min(64 << 10)].to_vec();
    heap.resize(heap.len().div_ceil(4096).max(1) * 4096, 0);
    let len = heap.len() as u64;
    let at = |v: u64| {
        if v >> 63 != 0 {
            v
        } else {
            HEAP + ((v % len) & !15)
        }
    };
    let mut libc = vec![0u8; 0x3000];
    let put = |b: &mut Vec<u8>, off: u64, v: u64| {
        b[off as usize..off as usize + 8].copy_from_slice(&v.to_le_bytes())
    };
    for i in 0..127u64 {
        put(&mut libc, 0x100 + 112 + 16 * i, ARENA + 96 + 16 * i);
        put(&mut libc, 0x100 + 120 + 16 * i, ARENA + 96 + 16 * i);
    }
    put(&mut libc, 0x100 + 96, at(word(data, 0)));
    put(
        &mut libc,
        0x100 + 24,
        if word(data, 1) == 0 {
            0
        } else {
            at(word(data, 1))
        },
    );
    let next = word(data, 2);
    put(
        &mut libc,
        0x100 + 2160,
        if next == 0 { ARENA } else { at(next) },
    );
    let mut mmapped = vec![0u8; 0x2000];
    put(&mut mmapped, 8, word(data, 3));
    let mut stack = vec![0u8; 0x1000];
    put(&mut stack, 0x800, at(word(data, 4)));
    let image = Image(vec![
        (LIBC, libc),
        (HEAP, heap),
        (MMAP, mmapped),
        (STACK, stack),
    ]);
    let maps: Vec<MapsEntry> = [
        format!(
            "{LIBC:x}-{:x} rw-p 00000000 08:01 42 /usr/lib/libc.so.6",
            LIBC + 0x3000
        ),
        format!("{HEAP:x}-{:x} rw-p 00000000 00:00 0 [heap]", HEAP + len),
        format!("{MMAP:x}-{:x} rw-p 00000000 00:00 0", MMAP + 0x2000),
        format!(
            "{STACK:x}-{:x} rw-p 00000000 00:00 0 [stack]",
            STACK + 0x1000
        ),
    ]
    .iter()
    .filter_map(|l| MapsEntry::parse(l))
    .collect();
    let threads = [ThreadRoots {
        tid: 1,
        sp: STACK + 0x400,
        fs_base: at(word(data, 5)),
        registers: (5..8).map(|i| at(word(data, i))).collect(),
    }];
    scan::scan(&image, &maps, &threads, limits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_is_a_whole_heap() {
        let seed = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fuzz/corpus/heap_scan/heap"
        ))
        .unwrap();
        let s = heap_image_scan(&seed, Limits::DEFAULT).unwrap();
        // The tcache struct (nothing points to it here) and the mmapped
        // chunk; the stack holds one block, a register the other.
        assert_eq!(s.unreachable, [(HEAP + 16, 0x288), (MMAP + 16, 0x1ff0)]);
        assert_eq!((s.blocks, s.cached_free), (4, 1));
    }

    #[test]
    fn heap_scan_takes_anything() {
        super::heap_scan(&[]);
        super::heap_scan(&[0xff; 200]);
        let mut seed = 0x1234_5678_9abc_def0u64;
        for n in [64, 100, 4200, 70_000] {
            let data: Vec<u8> = (0..n)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect();
            super::heap_scan(&data);
        }
    }
}
