//! Entry points of the fuzz targets in `fuzz/` (cargo fuzz), shared with the
//! replay test that runs the committed corpus under `cargo test`.

use crate::ctl::{parse, Cmd};

const TABLE: &[Cmd<u8>] = &[
    Cmd {
        verb: "start",
        min_args: 0,
        max_args: 0,
        op: 0,
    },
    Cmd {
        verb: "module",
        min_args: 0,
        max_args: usize::MAX,
        op: 1,
    },
    Cmd {
        verb: "interval",
        min_args: 1,
        max_args: 1,
        op: 2,
    },
];

/// `fuzz_targets/ctl.rs`: a control message written to a device's ctl
/// file. A message that parses names a verb of the table, with an argument
/// count in its bounds.
pub fn ctl(data: &[u8]) {
    if let Ok((op, args)) = parse(data, TABLE) {
        let cmd = &TABLE[usize::from(op)];
        assert!((cmd.min_args..=cmd.max_args).contains(&args.len()));
        assert!(data.len() <= crate::ctl::MAX_MESSAGE);
    }
}
