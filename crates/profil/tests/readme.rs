//! The README's C profil example, extracted, compiled against the static
//! library and run: its hottest cell must lie in work().

mod common;

use std::path::Path;

#[test]
fn readme_c_example_finds_work_hottest() {
    let readme =
        std::fs::read_to_string(Path::new(common::MANIFEST_DIR).join("README.md")).unwrap();
    let after = readme
        .split("<!-- example: profil.c")
        .nth(1)
        .expect("README marks the C example");
    let code = after
        .split("```c\n")
        .nth(1)
        .and_then(|s| s.split("\n```").next())
        .expect("a ```c block after the marker");
    let dir = common::tempdir();
    let src = dir.path().join("readme_profil.c");
    std::fs::write(&src, code).unwrap();
    let exe = dir.path().join("readme_profil");
    let st = std::process::Command::new("cc")
        .args(["-O1", "-Wall", "-I"])
        .arg(Path::new(common::MANIFEST_DIR).join("include"))
        .arg(&src)
        .arg(common::built().profile_dir.join("libprofdev_profil.a"))
        .args(["-lpthread", "-ldl", "-lm", "-lgcc_s", "-o"])
        .arg(&exe)
        .status()
        .expect("run cc");
    assert!(st.success());
    let out = common::run(&exe, &[], dir.path(), &[]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    // "hottest pc 0x...: N ticks; work() is at 0x..."
    let w: Vec<&str> = text.split_whitespace().collect();
    let hex = |s: &str| {
        usize::from_str_radix(s.trim_start_matches("0x").trim_end_matches([':', ';']), 16).unwrap()
    };
    let (hottest, ticks, work) = (hex(w[2]), w[3].parse::<u32>().unwrap(), hex(w[8]));
    let elf = common::elf_functions(&exe);
    let size = elf["work"].1 as usize;
    eprintln!("{text}");
    assert!(ticks >= 2, "{text}");
    assert!(
        (work..work + size).contains(&hottest),
        "{text} (work is {size} bytes)"
    );
}
