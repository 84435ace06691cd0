//! The Rust example (examples/gprof_hot.rs) calls gmon::start and
//! gmon::mcleanup; GNU gprof must put its hot function on top.

mod common;

#[test]
fn gprof_flat_profile_of_the_rust_example_has_hot_loop_on_top() {
    let exe = common::built().profile_dir.join("examples/gprof_hot");
    let dir = common::tempdir();
    let out = common::run(&exe, &["500", "50"], dir.path(), &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (pct, name, text) = common::gprof_top(&exe, &dir.path().join("gmon.out"));
    eprintln!("{text}");
    assert!(name.contains("hot_loop"), "top row is {name}:\n{text}");
    assert!(pct >= 75.0, "hot_loop has {pct}%:\n{text}");
}
