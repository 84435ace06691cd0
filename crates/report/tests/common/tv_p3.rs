//! Spec §2.7 TV-P3's abstract module: lines a..d; pc0, pc1 → line 1;
//! pc2 → lines 2..3; pc3 → line 4; f1 = [0,2) at line 1, f2 = [2,4) at
//! line 2. Shared by `src/prof.rs`'s unit tests and `tests/prof.rs`, which
//! bring `SourceMap`, `SrcRange` and `Function` into scope.

use super::*;

/// The TV-P3 source map.
pub struct TvP3;

impl SourceMap for TvP3 {
    fn lines(&self, pc: u64) -> Option<SrcRange> {
        let (first, last) = match pc {
            0 | 1 => (1, 1),
            2 => (2, 3),
            3 => (4, 4),
            _ => return None,
        };
        Some(SrcRange {
            file: "x.b".into(),
            first,
            last,
        })
    }
    fn function(&self, pc: u64) -> Option<Function> {
        let (name, line, addr) = match pc {
            0 | 1 => ("f1", 1, 0),
            2 | 3 => ("f2", 2, 2),
            _ => return None,
        };
        Some(Function {
            file: Some("x.b".into()),
            line: Some(line),
            name: name.into(),
            addr: Some(addr),
        })
    }
}
