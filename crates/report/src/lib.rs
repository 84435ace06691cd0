//! Text reports in the classic tools' exact formats.

pub mod prfpr;
