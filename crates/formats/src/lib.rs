//! Pure parsers and writers of the classic on-disk profile formats, byte for byte.
pub mod gmon;
