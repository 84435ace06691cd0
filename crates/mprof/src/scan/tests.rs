//! Synthetic memory images: a heap laid out as glibc 2.36 lays it out.

use super::heap::{BINS, NBINS, NEXT, STATE_SIZE, TOP};
use super::*;
use std::collections::BTreeMap;

/// A process image: regions of bytes, and its maps.
#[derive(Clone, Default)]
struct Image {
    regions: BTreeMap<u64, Vec<u8>>,
    maps: Vec<String>,
}

impl Memory for Image {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        // Across adjacent regions, as /proc/PID/mem reads across mappings.
        let mut done = 0;
        while done < buf.len() {
            let at = addr + done as u64;
            let Some((&s, bytes)) = self.regions.range(..=at).next_back() else {
                return false;
            };
            let off = (at - s) as usize;
            if off >= bytes.len() {
                return false;
            }
            let n = (bytes.len() - off).min(buf.len() - done);
            buf[done..done + n].copy_from_slice(&bytes[off..off + n]);
            done += n;
        }
        true
    }
}

impl Image {
    fn map(&mut self, start: u64, len: u64, perms: &str, path: &str) {
        self.regions.insert(start, vec![0; len as usize]);
        self.maps.push(format!(
            "{start:x}-{:x} {perms} 00000000 {} {path}",
            start + len,
            if path.starts_with('/') {
                "08:01 42"
            } else {
                "00:00 0"
            }
        ));
    }

    fn put(&mut self, addr: u64, v: u64) {
        let (&s, bytes) = self.regions.range_mut(..=addr).next_back().unwrap();
        let off = (addr - s) as usize;
        bytes[off..off + 8].copy_from_slice(&v.to_le_bytes());
    }

    fn word(&self, addr: u64) -> u64 {
        let mut b = [0; 8];
        assert!(self.read(addr, &mut b));
        u64::from_le_bytes(b)
    }

    fn maps(&self) -> Vec<MapsEntry> {
        let mut m: Vec<MapsEntry> = self
            .maps
            .iter()
            .map(|l| MapsEntry::parse(l).unwrap())
            .collect();
        m.sort_by_key(|m| m.start);
        m
    }

    /// An arena at `a`: every bin empty, `top`, `next`.
    fn arena(&mut self, a: u64, top: u64, next: u64) {
        for i in 0..NBINS {
            self.put(a + BINS + 16 * i, a + TOP + 16 * i);
            self.put(a + BINS + 16 * i + 8, a + TOP + 16 * i);
        }
        self.put(a + TOP, top);
        self.put(a + NEXT, next);
    }

    /// A chunk header at `c`: `size` with PREV_INUSE when `prev_in_use`.
    fn chunk(&mut self, c: u64, size: u64, prev_in_use: bool) {
        self.put(c + 8, size | prev_in_use as u64);
    }
}

const LIBC: u64 = 0x7f00_0000_0000;
const ARENA: u64 = LIBC + 0x100;
const HEAP: u64 = 0x5555_0000_0000;
const STACK: u64 = 0x7ffd_0000_0000;
const DATA: u64 = 0x5554_0000_0000;
const MMAP: u64 = 0x7f10_0000_0000;

/// The chunks of the main heap, in order (header addresses).
struct Layout {
    tcache: u64,
    global: u64,
    chained: u64,
    leak: u64,
    leak_child: u64,
    tcached: u64,
    fast: u64,
    freed: u64,
    in_reg: u64,
    top: u64,
}

/// A process: libc's data with main_arena, a program's data holding a
/// pointer to `global`, whose middle points to `chained`; `leak` points
/// to `leak_child`, nothing to `leak`; `tcached` sits in the tcache,
/// `fast` in fastbin 1, `freed` is free; a register holds `in_reg`; one
/// mmapped chunk is held by the stack, another by nothing.
fn process() -> (Image, Layout, Vec<ThreadRoots>) {
    let mut im = Image::default();
    im.map(
        LIBC - 0x1000,
        0x1000,
        "r-xp",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
    );
    im.map(LIBC, 0x2000, "rw-p", "/usr/lib/x86_64-linux-gnu/libc.so.6");
    im.map(LIBC + 0x2000, 0x1000, "rw-p", "");
    im.map(DATA, 0x1000, "rw-p", "/usr/bin/prog");
    im.map(DATA + 0x1000, 0x1000, "rw-p", "");
    im.map(HEAP, 0x10000, "rw-p", "[heap]");
    im.map(STACK, 0x4000, "rw-p", "[stack]");
    im.map(MMAP, 0x2000, "rw-p", "");
    im.map(MMAP + 0x10000, 0x3000, "rw-p", "");
    let mut c = HEAP;
    let mut next = |size: u64| {
        let at = c;
        c += size;
        at
    };
    let l = Layout {
        tcache: next(0x290),
        global: next(0x60),
        chained: next(0x40),
        leak: next(0x1000),
        leak_child: next(0x30),
        tcached: next(0x20),
        fast: next(0x30),
        freed: next(0x50),
        in_reg: next(0x20),
        top: next(0),
    };
    for (at, size) in [
        (l.tcache, 0x290),
        (l.global, 0x60),
        (l.chained, 0x40),
        (l.leak, 0x1000),
        (l.leak_child, 0x30),
        (l.tcached, 0x20),
        (l.fast, 0x30),
    ] {
        im.chunk(at, size, true);
    }
    im.chunk(l.freed, 0x50, true);
    im.chunk(l.in_reg, 0x20, false); // `freed` is free
    im.put(l.in_reg, 0x50); // its prev_size
    im.chunk(l.top, 0x10000 - (l.top - HEAP), true);
    im.arena(ARENA, l.top, ARENA);
    // fastbin 1 (chunks of 0x30): `fast`, its fd null (safe-linked).
    im.put(ARENA + 16 + 8, l.fast);
    im.put(l.fast + 16, (l.fast + 16) >> 12);
    // The tcache: counts[0] = 1, entries[0] = `tcached`'s mem.
    im.put(l.tcache + 16, 1);
    im.put(l.tcache + 16 + 128, l.tcached + 16);
    im.put(l.tcached + 16, (l.tcached + 16) >> 12);
    // libc's own pointer to the tcache (its TLS, in fact): a root.
    im.put(LIBC + 0x2000 + 8, l.tcache + 16);
    // Roots: the program's data; an interior pointer; a chain.
    im.put(DATA + 0x10, l.global + 16);
    im.put(l.global + 16 + 40, l.chained + 16 + 8);
    im.put(l.leak + 16 + 0x800, l.leak_child + 16);
    // The mmapped chunks; the stack holds the second.
    im.chunk(MMAP, 0x2000 | 2, false);
    im.chunk(MMAP + 0x10000, 0x3000 | 2, false);
    im.put(STACK + 0x3000, MMAP + 0x10000 + 16 + 100);
    // Below the stack pointer (and its red zone): stale, not a root.
    im.put(STACK + 0x100, l.leak + 16);
    let threads = vec![ThreadRoots {
        tid: 1,
        sp: STACK + 0x2000,
        fs_base: 0,
        registers: vec![0, l.in_reg + 16, 42],
    }];
    (im, l, threads)
}

fn run(im: &Image, threads: &[ThreadRoots]) -> Result<Scan, ScanError> {
    scan(im, &im.maps(), threads, Limits::DEFAULT)
}

#[test]
fn the_unreachable_blocks_of_a_synthetic_heap() {
    let (im, l, threads) = process();
    let s = run(&im, &threads).unwrap();
    assert_eq!(
        s.unreachable,
        vec![
            (l.leak + 16, 0x1000 - 8),
            (l.leak_child + 16, 0x30 - 8),
            (MMAP + 16, 0x2000 - 16)
        ]
    );
    // tcache struct, global, chained, leak, leak_child, in_reg, 2 mmapped
    assert_eq!(s.blocks, 8);
    assert_eq!(s.cached_free, 2);
    assert_eq!((s.arenas, s.threads), (1, 1));
    let g = s.groups();
    assert_eq!(
        g[0],
        Group {
            size: 0x1ff0,
            count: 1
        }
    );
    let text = render(&s, 7, std::time::Duration::from_millis(3));
    assert!(
        text.starts_with("Unreachable: 12304 bytes in 3 blocks"),
        "{text}"
    );
    assert!(text.contains("\n1\t4088\t4088\n"), "{text}");
    assert!(text.contains("held 3 ms"), "{text}");
}

#[test]
fn a_red_zone_and_registers_are_roots() {
    let (mut im, l, mut threads) = process();
    im.put(STACK + 0x2000 - 64, l.leak + 16 + 3);
    threads[0].registers.push(MMAP + 0x20);
    let s = run(&im, &threads).unwrap();
    assert_eq!(s.unreachable, vec![]);
}

#[test]
fn a_thread_arena() {
    let (mut im, l, threads) = process();
    let h = 0x7e00_0400_0000u64;
    im.map(h, 0x21000, "rw-p", "");
    let a = h + 48;
    let first = (a + STATE_SIZE + 15) & !15;
    let leak = first + 0x290;
    let top = leak + 0x100;
    im.put(h, a);
    im.put(h + 16, 0x21000);
    im.arena(a, top, ARENA);
    im.put(ARENA + NEXT, a);
    im.chunk(first, 0x290, true);
    im.chunk(leak, 0x100 | 4, true);
    im.chunk(top, (h + 0x21000 - top) | 4, true);
    // A tcache pointer in the thread's TLS (here: libc's bss).
    im.put(LIBC + 0x2000 + 16, first + 16);
    let s = run(&im, &threads).unwrap();
    assert_eq!(s.arenas, 2);
    assert!(s.unreachable.contains(&(leak + 16, 0x100 - 8)), "{s:?}");
    assert!(s.unreachable.contains(&(l.leak + 16, 0x1000 - 8)));
}

#[test]
fn other_allocators_are_refused() {
    let (mut im, _, threads) = process();
    // No glibc mapped (static, or musl).
    im.maps.retain(|m| !m.contains("libc.so"));
    let e = run(&im, &threads).unwrap_err();
    assert!(
        matches!(e, ScanError::NotGlibc(ref s) if s.contains("maps no glibc")),
        "{e}"
    );
    // glibc mapped, no main_arena in its data (its malloc unused, or
    // another layout).
    let (mut im, _, threads) = process();
    im.regions.insert(LIBC, vec![0; 0x2000]);
    let e = run(&im, &threads).unwrap_err();
    assert!(e.to_string().contains("main_arena was not found"), "{e}");
}

#[test]
fn malloc_never_called() {
    let (mut im, _, threads) = process();
    im.put(ARENA + TOP, ARENA + TOP);
    im.put(ARENA + 24, 0);
    let s = run(&im, &threads).unwrap();
    // The mmapped chunks only.
    assert_eq!((s.blocks, s.unreachable.len()), (2, 1));
}

#[test]
fn corrupt_headers_are_refused() {
    let (im, l, threads) = process();
    for (at, v, what) in [
        (l.global + 8, 0x61 + 8, "chunk size 0x69"),
        (l.global + 8, 0x10_0000 | 1, "chunk size"),
        (l.global + 8, 0x11, "top chunk"),
        (l.leak + 8, 0x1003, "an mmapped chunk inside a heap"),
    ] {
        let mut bad = im.clone();
        bad.put(at, v);
        let e = run(&bad, &threads).unwrap_err();
        assert!(e.to_string().contains(what), "{what}: {e}");
    }
    // A fastbin pointing at a chunk of another size.
    let mut bad = im.clone();
    bad.put(ARENA + 16, l.fast);
    assert!(run(&bad, &threads)
        .unwrap_err()
        .to_string()
        .contains("fastbin 0"));
    // A fastbin list that loops.
    let mut bad = im.clone();
    bad.put(l.fast + 16, ((l.fast + 16) >> 12) ^ l.fast);
    assert!(run(&bad, &threads).is_err());
    // A top chunk the walk cannot reach.
    let mut bad = im.clone();
    bad.put(ARENA + TOP, l.top + 8);
    assert!(run(&bad, &threads).is_err());
}

#[test]
fn a_limit_on_the_bytes_read() {
    let (im, _, threads) = process();
    let e = scan(&im, &im.maps(), &threads, Limits { max_bytes: 0x4000 }).unwrap_err();
    assert_eq!(e, ScanError::TooLarge { max: 0x4000 });
}

/// A small deterministic generator (xorshift).
fn rng(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

#[test]
fn random_corruption_never_loops_or_panics() {
    let (im, l, threads) = process();
    let words = [
        ARENA + TOP,
        ARENA + NEXT,
        ARENA + 16,
        ARENA + 24,
        l.tcache + 16,
        l.tcache + 16 + 128,
        l.tcached + 16,
        l.fast + 16,
        MMAP,
        MMAP + 8,
        MMAP + 0x10008,
    ];
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let interesting = |seed: &mut u64, near: u64| match rng(seed) % 6 {
        0 => 0,
        1 => near.wrapping_add(rng(seed) % 0x200),
        2 => rng(seed),
        3 => u64::MAX,
        4 => ((near >> 12) ^ near).wrapping_add(rng(seed) % 64),
        _ => (rng(seed) % 0x2000) | (rng(seed) & 7),
    };
    for round in 0..3000 {
        let mut bad = im.clone();
        for _ in 0..1 + round % 4 {
            let at = if rng(&mut seed) % 2 == 0 {
                words[(rng(&mut seed) % words.len() as u64) as usize]
            } else {
                HEAP + (rng(&mut seed) % 0x1400) / 8 * 8
            };
            let near = im.word(at);
            let v = interesting(&mut seed, near.max(HEAP));
            bad.put(at, v);
        }
        if let Ok(s) = run(&bad, &threads) {
            assert!(s.blocks <= 0x10000 / 32 + 2, "round {round}: {s:?}");
        }
    }
}

#[test]
fn a_tls_block_merged_with_an_mmapped_chunk_is_still_a_root() {
    // The kernel merges an mmapped chunk with the anonymous mapping above
    // it (the main thread's TLS): the chunk is not a root, the rest is.
    let (mut im, l, mut threads) = process();
    im.maps
        .retain(|m| !m.starts_with(&format!("{:x}-", MMAP + 0x10000)));
    im.map(MMAP + 0x10000, 0x4000, "rw-p", "");
    im.chunk(MMAP + 0x10000, 0x3000 | 2, false);
    // The TLS block holds the leak; the stack no longer holds the chunk.
    threads[0].fs_base = MMAP + 0x13800;
    im.put(MMAP + 0x13800 - 8, l.leak + 16);
    im.put(STACK + 0x3000, 0);
    let s = run(&im, &threads).unwrap();
    assert!(!s.unreachable.contains(&(l.leak + 16, 0x1000 - 8)), "{s:?}");
    // The chunk is a block, unreachable: its mapping's tail was scanned,
    // not the chunk itself.
    assert!(
        s.unreachable.contains(&(MMAP + 0x10000 + 16, 0x3000 - 16)),
        "{s:?}"
    );
}

#[test]
fn a_thread_arena_of_two_heaps() {
    let (mut im, _, threads) = process();
    let h = 0x7e00_0400_0000u64;
    let h2 = h + HEAP_MAX_SIZE;
    im.map(h, 0x21000, "rw-p", "");
    im.map(h2, 0x10000, "rw-p", "");
    let a = h + 48;
    let first = (a + STATE_SIZE + 15) & !15;
    // The first heap: a tcache, a leak, the old top (free), fenceposts.
    let leak = first + 0x290;
    let old_top = leak + 0x100;
    let fence = h + 0x21000 - 32;
    im.put(h, a);
    im.put(h + 16, 0x21000);
    im.chunk(first, 0x290, true);
    im.chunk(leak, 0x100 | 4, true);
    im.chunk(old_top, (fence - old_top) | 4, true);
    im.chunk(fence, 16, false);
    im.chunk(fence + 16, 0, true);
    // The second heap, the arena's top one: a leak and the top chunk.
    let leak2 = h2 + 48;
    let top = leak2 + 0x200;
    im.put(h2, a);
    im.put(h2 + 8, h);
    im.put(h2 + 16, 0x10000);
    im.chunk(leak2, 0x200 | 4, true);
    im.chunk(top, (h2 + 0x10000 - top) | 4, true);
    im.arena(a, top, ARENA);
    im.put(ARENA + NEXT, a);
    im.put(LIBC + 0x2000 + 16, first + 16);
    let s = run(&im, &threads).unwrap();
    assert_eq!(s.arenas, 2);
    assert!(s.unreachable.contains(&(leak + 16, 0x100 - 8)), "{s:?}");
    assert!(s.unreachable.contains(&(leak2 + 16, 0x200 - 8)), "{s:?}");
    assert!(
        !s.unreachable.iter().any(|&(m, _)| m == old_top + 16),
        "{s:?}"
    );
    // A heap_info naming another arena is refused.
    im.put(h2, a + 16);
    let e = run(&im, &threads).unwrap_err();
    assert!(e.to_string().contains("heap_info"), "{e}");
}

#[test]
fn a_blocks_last_word_is_the_next_chunks_prev_size() {
    // An in-use chunk's last 8 usable bytes lie in the next header's
    // prev_size field: a pointer kept there counts (bash keeps its hash
    // tables' pointers so).
    let (mut im, l, threads) = process();
    assert_eq!(l.chained, l.global + 0x60);
    im.put(l.chained, l.leak + 16);
    let s = run(&im, &threads).unwrap();
    assert_eq!(s.unreachable, [(MMAP + 16, 0x2000 - 16)]);
    // And a pointer to a block's last usable byte is an interior one.
    let (mut im, l, threads) = process();
    im.put(DATA + 0x18, l.leak + 16 + 0x1000 - 8 - 1);
    let s = run(&im, &threads).unwrap();
    assert_eq!(s.unreachable, [(MMAP + 16, 0x2000 - 16)]);
}

#[test]
fn memory_the_program_maps_itself_is_a_root() {
    // Python's object arenas: anonymous memory holding the only pointer
    // to a block (and a shared mapping holding another's).
    let (mut im, l, threads) = process();
    let arena = 0x7f20_0000_0000u64;
    im.map(arena, 0x4000, "rw-p", "");
    im.put(arena + 0x1008, l.leak + 16 + 5);
    let s = run(&im, &threads).unwrap();
    assert!(!s.unreachable.contains(&(l.leak + 16, 0x1000 - 8)), "{s:?}");
    assert!(!s.unreachable.contains(&(l.leak_child + 16, 0x30 - 8)));
    assert_eq!(s.unreachable, [(MMAP + 16, 0x2000 - 16)]);
    let (mut im, l, threads) = process();
    im.map(arena, 0x1000, "rw-s", "/dev/shm/pool");
    im.put(arena + 8, l.leak + 16);
    assert_eq!(
        run(&im, &threads).unwrap().unreachable,
        [(MMAP + 16, 0x2000 - 16)]
    );
}

#[test]
fn kernel_pages_devices_guards_and_dead_stacks_are_no_roots() {
    let (mut im, l, threads) = process();
    let at = 0x7f30_0000_0000u64;
    // A device's memory, a guard page, [vvar]: each holds the leak.
    im.map(at, 0x1000, "rw-s", "/dev/dri/card0");
    im.map(at + 0x1000, 0x1000, "---p", "");
    im.map(at + 0x2000, 0x1000, "rw-p", "[vvar]");
    for m in 0..3 {
        im.put(at + m * 0x1000 + 8, l.leak + 16);
    }
    // glibc's cache of a dead thread's stack: its guard, its stack
    // holding the leak, its thread control block at the top.
    let stack = at + 0x10000;
    im.map(stack - 0x1000, 0x1000, "---p", "");
    im.map(stack, 0x8000, "rw-p", "");
    im.put(stack + 0x4000, l.leak + 16);
    let tcb = stack + 0x8000 - 0x900;
    im.put(tcb, tcb);
    im.put(tcb + 16, tcb);
    // Its dtv, which glibc keeps with the stack: a root.
    im.put(tcb + 8, l.leak_child + 16 + 16);
    let s = run(&im, &threads).unwrap();
    assert!(s.unreachable.contains(&(l.leak + 16, 0x1000 - 8)), "{s:?}");
    assert!(!s.unreachable.contains(&(l.leak_child + 16, 0x30 - 8)));
    // A live thread's (its fs base is the block): a root.
    let mut live = threads.clone();
    live.push(ThreadRoots {
        tid: 2,
        sp: STACK + 0x2000,
        fs_base: tcb,
        registers: vec![],
    });
    let s = run(&im, &live).unwrap();
    assert!(!s.unreachable.contains(&(l.leak + 16, 0x1000 - 8)), "{s:?}");
    // Without a guard page below, no thread's stack: a root (a program's
    // own memory may look like a thread control block).
    im.maps
        .retain(|m| !m.starts_with(&format!("{:x}-", stack - 0x1000)));
    let s = run(&im, &threads).unwrap();
    assert!(!s.unreachable.contains(&(l.leak + 16, 0x1000 - 8)), "{s:?}");
}

const LIB: u64 = 0x7f40_0000_0000;
const TOPA: u64 = 0x7f50_0000_0000;
const LEAF: u64 = 0x7f60_0000_0000;
const AREA: u64 = 0x7f70_0000_0000;

impl Image {
    /// A mapping of `len` bytes of which only [at, at + have) is readable
    /// (the rest of a MAP_NORESERVE table, never touched).
    fn sparse(&mut self, start: u64, len: u64, at: u64, have: u64) {
        self.maps.push(format!(
            "{start:x}-{:x} rw-p 00000000 00:00 0 ",
            start + len
        ));
        self.regions.insert(at, vec![0; have as usize]);
    }

    fn put32(&mut self, addr: u64, lo: u64, hi: u64) {
        self.put(addr, lo | hi << 32);
    }
}

/// c/mprof.c's tables in `process()`: `leak` allocated with stack 2
/// (3 frames: the program, libc, a module the process does not map),
/// `leak_child` with no stack (its site, 5, in the program), the mmapped
/// chunk not in the table.
fn with_table() -> (Image, Layout, Vec<ThreadRoots>) {
    let (mut im, l, threads) = process();
    im.map(LIB, 0x1000, "rw-p", "/tmp/s/libprofdev_mprof.so");
    let d = LIB + 0x220;
    let magic = *b"profdev-mscan 1\0";
    im.put(d, u64::from_le_bytes(magic[..8].try_into().unwrap()));
    im.put(d + 8, u64::from_le_bytes(magic[8..].try_into().unwrap()));
    im.put32(d + 16, 26, 1 << 21);
    im.put32(d + 24, 4096, 0);
    for (i, v) in [TOPA, 1, 1, 0, 1, AREA, 1].into_iter().enumerate() {
        let var = LIB + 0x400 + 8 * i as u64;
        im.put(var, v);
        im.put(
            d + 32 + 8 * i as u64,
            if i == 3 { LIB + 0x500 } else { var },
        );
    }
    let t = HEAP >> 26;
    im.put32(LIB + 0x500, t, 0);
    im.sparse(TOPA, 8 << 21, TOPA + 8 * t, 8);
    im.put(TOPA + 8 * t, LEAF);
    im.sparse(LEAF, 64 << 20, LEAF, 0x10000);
    // Entries: size << 17 | site << 1 | 1, then the stack.
    let (e1, e2) = (
        LEAF + (l.leak + 16 - HEAP),
        LEAF + (l.leak_child + 16 - HEAP),
    );
    im.put(e1, 4000 << 17 | 5 << 1 | 1);
    im.put(e1 + 8, 2);
    im.put(e2, 30 << 17 | 5 << 1 | 1);
    // The shared table: header, modules, a site, a stack, its frames.
    im.map(AREA, 0x20000, "rw-s", "/tmp/s/out/live.7.0");
    let magic = *b"profdev-mlive 1\0";
    im.put(AREA, u64::from_le_bytes(magic[..8].try_into().unwrap()));
    im.put(AREA + 8, u64::from_le_bytes(magic[8..].try_into().unwrap()));
    im.put(AREA + 24, 0x20000);
    im.put(AREA + 32, 0x1000);
    im.put(AREA + 48, 0x2000);
    im.put32(AREA + 56, 4, 16);
    im.put32(AREA + 64, 0x200, 192);
    im.put32(AREA + 72, 0, 16); // l_addr at 0, path at 16
    im.put32(AREA + 80, 256, 272); // path size, dev at 272
    im.put32(AREA + 88, 280, 0); // ino at 280
    im.put32(AREA + 104, 0, 8); // a site's pc at 0, module at 8
    im.put(AREA + 168, 0x8000);
    im.put(AREA + 176, 0x10000);
    im.put32(AREA + 184, 16, 64);
    im.put32(AREA + 192, 128, 16);
    let path = |im: &mut Image, at: u64, p: &str| {
        for (i, c) in p.as_bytes().chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            im.put(at + 8 * i as u64, u64::from_le_bytes(w));
        }
    };
    // Module 0: named wrongly, found by its device and inode (08:01 42);
    // 1: by its path; 2: mapped nowhere, so never named.
    let bias = [DATA - 0x1000, LIBC - 0x3000, 0x1000];
    let names = [
        "/tmp/stale-name",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "/etc/shadow",
    ];
    for i in 0..3u64 {
        let m = AREA + 0x1000 + 0x200 * i;
        im.put(m, bias[i as usize]);
        path(&mut im, m + 16, names[i as usize]);
        if i == 0 {
            im.put(m + 272, 8 << 8 | 1);
            im.put(m + 280, 42);
        }
    }
    im.put(AREA + 0x2000 + 5 * 192, bias[0] + 0x1234);
    im.put(AREA + 0x2000 + 5 * 192 + 8, 1);
    let st = AREA + 0x8000 + 2 * 128;
    im.put32(st + 8, 1, 3); // ready, depth
    im.put32(st + 16, 4, 5); // first frame, site
    for (i, (pc, m)) in [(bias[0] + 0x1234, 0), (bias[1] + 0x99, 1), (bias[2] + 7, 2)]
        .into_iter()
        .enumerate()
    {
        im.put(AREA + 0x10000 + 16 * (4 + i as u64), pc);
        im.put(AREA + 0x10000 + 16 * (4 + i as u64) + 8, m);
    }
    (im, l, threads)
}

#[test]
fn where_mprof_saw_the_unreachable_blocks_allocated() {
    let (im, l, threads) = process();
    let bare = run(&im, &threads).unwrap();
    assert_eq!(bare.seen, None);
    let (im, _, threads) = with_table();
    let s = run(&im, &threads).unwrap();
    assert_eq!(s.unreachable, bare.unreachable);
    // The library's data is a root; its tables are not.
    assert_eq!(s.root_bytes, bare.root_bytes + 0x1000);
    let prog = "/usr/bin/prog".to_string();
    let libc = "/usr/lib/x86_64-linux-gnu/libc.so.6".to_string();
    let stack = vec![
        (prog.clone(), 0x1234),
        (libc, 0x99),
        (String::new(), 0x1007),
    ];
    assert_eq!(
        s.seen,
        Some(vec![
            Some(Seen {
                asked: 4000,
                frames: std::sync::Arc::new(stack.clone()),
                stack: true
            }),
            Some(Seen {
                asked: 30,
                frames: std::sync::Arc::new(vec![(prog.clone(), 0x1234)]),
                stack: false
            }),
            None
        ])
    );
    let g = s.origins().unwrap();
    let row = |g: &OriginGroup| (g.frames.clone(), g.blocks, g.bytes, g.asked);
    assert_eq!(
        g.iter().map(row).collect::<Vec<_>>(),
        [
            (None, 1, 0x2000 - 16, 0),
            (Some(stack), 1, 0x1000 - 8, 4000),
            (Some(vec![(prog, 0x1234)]), 1, 0x30 - 8, 30)
        ]
    );
    assert!(!s.sampled);
    // Sampling (the header's obj_shift): the blocks not in the table
    // may be unsampled ones.
    let mut sampled = im.clone();
    sampled.put32(AREA + 16, 212, 7);
    sampled.put32(AREA + 208, 10, 0);
    assert!(run(&sampled, &threads).unwrap().sampled);
    // A library that does not count: no table.
    let mut off = im.clone();
    off.put(LIB + 0x400 + 48, 0);
    assert_eq!(run(&off, &threads).unwrap().seen, None);
    let _ = l;
}

#[test]
fn a_hostile_table_never_panics_nor_reads_past_the_limit() {
    let (im, _, threads) = with_table();
    let words: Vec<u64> = (0..12)
        .map(|i| LIB + 0x220 + 8 * i)
        .chain((0..7).map(|i| LIB + 0x400 + 8 * i))
        .chain((0..26).map(|i| AREA + 8 * i))
        .chain([
            TOPA + 8 * (HEAP >> 26),
            AREA + 0x8000 + 264,
            AREA + 0x8000 + 272,
        ])
        .chain([AREA + 0x2000 + 5 * 192 + 8, AREA + 0x10000 + 72])
        .collect();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for round in 0..2000 {
        let mut bad = im.clone();
        for _ in 0..1 + round % 3 {
            let at = words[(rng(&mut seed) % words.len() as u64) as usize];
            let v = match rng(&mut seed) % 5 {
                0 => 0,
                1 => u64::MAX - rng(&mut seed) % 64,
                2 => rng(&mut seed),
                3 => im.word(at).wrapping_add(rng(&mut seed) % 0x100),
                _ => rng(&mut seed) % 0x10000,
            };
            bad.put(at, v);
        }
        let limits = Limits {
            max_bytes: 64 << 20,
        };
        if let Ok(s) = scan(&bad, &bad.maps(), &threads, limits) {
            assert!(s.read_bytes <= limits.max_bytes, "round {round}");
        }
    }
}

#[test]
fn a_table_past_the_limit_leaves_the_scan_without_stacks() {
    let (im, _, threads) = with_table();
    let full = run(&im, &threads).unwrap();
    assert!(full.seen.is_some() && full.unseen.is_none());
    let limits = Limits {
        max_bytes: full.read_bytes - 1,
    };
    let s = scan(&im, &im.maps(), &threads, limits).unwrap();
    assert_eq!((s.seen, &s.unreachable), (None, &full.unreachable));
    assert!(s.unseen.unwrap().contains("the scan's bound"));
}
