use std::ffi::OsString;
use std::process::ExitCode;

pub fn main(_args: Vec<OsString>) -> ExitCode {
    ExitCode::from(1)
}
