//! The `profdev` binary.
fn main() {}
