// mprof's test of a program with its own allocator: a bump allocator
// over a static arena, never calling malloc (see mprof_e2e.rs).
use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering};

const SIZE: usize = 1 << 20;
static mut ARENA: [u8; SIZE] = [0; SIZE];
static NEXT: AtomicUsize = AtomicUsize::new(0);

struct Bump;

unsafe impl GlobalAlloc for Bump {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let mut cur = NEXT.load(Ordering::Relaxed);
        loop {
            let start = (cur + l.align() - 1) & !(l.align() - 1);
            if start + l.size() > SIZE {
                return std::ptr::null_mut();
            }
            match NEXT.compare_exchange(cur, start + l.size(), Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return (std::ptr::addr_of_mut!(ARENA) as *mut u8).add(start),
                Err(c) => cur = c,
            }
        }
    }
    unsafe fn dealloc(&self, _: *mut u8, _: Layout) {}
}

#[global_allocator]
static A: Bump = Bump;

fn main() {
    let v: Vec<u64> = (0..1000).collect();
    std::hint::black_box(&v);
}
