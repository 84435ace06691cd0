#[inline(never)]
fn called(i: u64) -> u64 {
    std::hint::black_box(i * 3 + 1)
}

#[inline(never)]
fn sometimes(i: u64) -> u64 {
    if std::hint::black_box(i) % 4 == 0 {
        called(i)
    } else {
        i
    }
}

fn main() {
    let mut s = 0;
    for i in 0..1000 {
        s += sometimes(i);
    }
    println!("{s}");
}
