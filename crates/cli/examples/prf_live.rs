use profdev_dev::prf::*;
use profdev_dev::{Dev, Engine, OpenMode, Qid};
use std::sync::Arc;
fn main() {
    let syms = profdev_symbolize::KernelSymbols::running().unwrap();
    let mut addrs: Vec<u64> = std::iter::once(0).chain(syms.all().iter().filter(|s| s.is_text() && !s.name.starts_with("__pfx_")).map(|s| s.addr)).collect();
    addrs.sort_unstable(); addrs.dedup();
    let p = Prf::new(PrfConfig::new(vec![0, 1]), Engine::new(Arc::new(profdev_sample::PerfFactory::new())));
    let root = p.gen(Qid::ROOT).unwrap();
    let all = root[0].qid;
    let mut c = p.open(all, OpenMode::ReadWrite).unwrap();
    let bytes: Vec<u8> = addrs.iter().flat_map(|a| a.to_ne_bytes()).collect();
    println!("load {:?}", p.write(&mut c, 0, &bytes).map(|n| n / 8));
    println!("on {:?}", p.ioctl(&mut c, PRF_SETSTATE, 1, &[], 0));
    let t = std::time::Instant::now();
    std::process::Command::new("dd").args(["if=/dev/zero","of=/dev/null","bs=64k","count=100000"]).status().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(std::env::var("MS").map(|v| v.parse().unwrap()).unwrap_or(500)));
    println!("off {:?} after {:?}", p.ioctl(&mut c, PRF_SETSTATE, 0, &[], 0), t.elapsed());
    let n = addrs.len();
    let tab = p.table();
    for v in [View::All, View::Cpu(0), View::Cpu(1)] {
        let ctr = tab.counters(v).unwrap();
        let total: u64 = ctr.iter().sum();
        println!("{v:?}: total {total} user {} idle {}", ctr[n], ctr[n+1]);
    }
    let ctr = tab.counters(View::All).unwrap();
    let mut idx: Vec<usize> = (0..n).collect();
    idx.sort_by_key(|&i| std::cmp::Reverse(ctr[i]));
    for &i in &idx[..8] {
        let name = syms.lookup(addrs[i]).map(|(s, _)| s.name.clone()).unwrap_or_default();
        println!("{:6} {:#x} {}", ctr[i], addrs[i], name);
    }
    let r = p.read(&mut c, 0, u32::MAX).unwrap();
    println!("image {} bytes = {}", r.len(), (2*n+2)*8);
}
