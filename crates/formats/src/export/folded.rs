//! Folded stacks: one line per distinct stack, `root;…;leaf count`, the
//! input of Brendan Gregg's `flamegraph.pl` and `inferno-flamegraph`
//! (what `stackcollapse-perf.pl` prints). Lines are sorted; counts are
//! samples. A `;` inside a name is replaced by `:`, so that it cannot
//! split a frame.

use super::{Names, Tree};
use crate::recording::Recording;

/// The folded text of `rec`.
pub fn write(rec: &Recording) -> String {
    let names = Names::new(rec);
    let tree = Tree::new(&names);
    let mut lines: Vec<String> = Vec::new();
    for (i, n) in tree.nodes.iter().enumerate().skip(1) {
        if n.self_count > 0 {
            let path: Vec<String> = tree
                .path(&names, i as u32)
                .iter()
                .map(|s| s.replace(';', ":"))
                .collect();
            lines.push(format!("{} {}\n", path.join(";"), n.self_count));
        }
    }
    // Samples without frames have no line (they have nothing to show).
    lines.sort();
    lines.concat()
}
