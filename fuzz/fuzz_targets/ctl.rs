#![no_main]
use libfuzzer_sys::fuzz_target;
use profdev_dev::ctl::{parse, Cmd};

const TABLE: &[Cmd<u8>] = &[
    Cmd { verb: "start", min_args: 0, max_args: 0, op: 0 },
    Cmd { verb: "module", min_args: 0, max_args: usize::MAX, op: 1 },
    Cmd { verb: "interval", min_args: 1, max_args: 1, op: 2 },
];

fuzz_target!(|data: &[u8]| {
    let _ = parse(data, TABLE);
});
