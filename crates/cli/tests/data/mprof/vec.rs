// mprof's Rust test: a Vec's growth charged to the user's line.
fn main() {
    let mut v: Vec<u64> = Vec::new();
    for i in 0..1000u64 {
        v.push(std::hint::black_box(i)); // line 5: grows to 1024 x 8 bytes
    }
    println!("{}", v.len());
    std::mem::forget(v);
}
