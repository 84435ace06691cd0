//! Folded stacks: one line per distinct stack, `root;…;leaf count`, the
//! input of Brendan Gregg's `flamegraph.pl` and `inferno-flamegraph`
//! (what `stackcollapse-perf.pl` prints). Lines are sorted; counts are
//! samples. A `;` inside a name is replaced by `:`, so that it cannot
//! split a frame.
//!
//! Of an `off-cpu` or `wall` view ([`Recording::view`]) the counts are
//! microseconds instead: the ns of the line's samples summed, divided by
//! 1000 and rounded (a line that rounds to 0 µs is left out).

use super::{Names, Tree};
use crate::recording::Recording;

/// The folded text of `rec`.
pub fn write(rec: &Recording) -> String {
    let names = Names::new(rec);
    let tree = Tree::new(&names);
    let mut lines: Vec<String> = Vec::new();
    for (i, n) in tree.nodes.iter().enumerate().skip(1) {
        let count = match names.timed() {
            true => (n.self_count + 500) / 1000,
            false => n.self_count,
        };
        if count > 0 {
            let path: Vec<String> = tree
                .path(&names, i as u32)
                .iter()
                .map(|s| s.replace(';', ":"))
                .collect();
            lines.push(format!("{} {count}\n", path.join(";")));
        }
    }
    // Samples without frames have no line (they have nothing to show).
    lines.sort();
    lines.concat()
}
