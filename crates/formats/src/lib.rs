//! Pure parsers and writers of the classic on-disk profile formats.
//!
//! Each module names its lineage and states every field's width and byte
//! order. Nothing here does I/O: functions take bytes and return values, or
//! take values and return bytes.

pub mod gmon;
pub mod kpdata;
pub mod prflog;
pub mod prof_histogram;
pub mod symelf;

#[doc(hidden)]
pub mod fuzzing;
