//! Text reports in the classic tools' exact formats.
