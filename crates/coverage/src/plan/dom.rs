//! Pass 11, hit mode, its last two rules: blocks that ran exactly when
//! one of the blocks they lead to ran, by dominance (Agrawal's
//! observation that a block's coverage follows from the blocks it
//! dominates), and blocks that ran exactly when one of the two blocks
//! leading to them ran (joins).
//!
//! **Dominance.** Block X runs to its end once entered (no call, nothing
//! before its last instruction that may not go on) and leaves by a direct
//! jump, a conditional jump or by falling into the next block. Each block
//! S it may go on to is *dominated* by X: every way to S from anywhere
//! control may enter the module passes through X first. Then X ran
//! exactly when one of them did:
//!
//! * X ran: it reached its end and went on to one of them, which ran;
//! * S ran: control came to S through X, since nothing else reaches S.
//!
//! X keeps no probe: it is [`How::Implied`] by its one way on, or
//! [`How::Branches`] of its two. Where the chains and forks of `hits.rs`
//! need S to have X as its only way in, dominance lets S have others
//! that X dominates in turn: a loop's first block with its own way back,
//! the block after an `if` that is entered both from X and from the
//! `if`'s arm. A loop's guard (`test; jle out`), the entry block of a
//! function whose first branch leads into a loop: these go. X itself may
//! be entered from anywhere (a C++ landing pad may be X).
//!
//! **Joins.** Block J is entered by two ways alone (no entry from
//! outside, as for a chain), each from a block that runs to its end and
//! goes on to J alone (a direct jump, or falling through): J ran exactly
//! when one of them did. The join after the two arms of an `if` that
//! each hold a call is the common case (no meeting reaches it: a call
//! may not return).
//!
//! **Ways in.** Dominators are found (Cooper, Harvey and Kennedy's
//! iteration) over the module's blocks, with every direct branch, call
//! and fall-through (`hits.rs`, `ways`) as an edge, below one root that
//! leads to every block control may reach from outside the module's own
//! branches: function and section starts, jump tables' targets, stored
//! code addresses and C++ landing pads (`entered`), every block of a
//! function with an indirect jump whose targets are unknown, every block
//! with no way in or that no way from the root reaches (a cycle entered
//! from nowhere), a block a branch leads into the middle of, and the
//! block after one whose last instruction does not decode. The return
//! from a call comes back where the call's block falls through, an edge
//! like any other (a `longjmp` to a `setjmp` comes back there too, after
//! its call ran).
//!
//! Both rules err only where the others do: a fault or an asynchronous
//! signal whose handler does not return, inside X, leaves X unmarked
//! though it ran; inside a block leading to J, J marked though it did not
//! run. Where a module runs before its probes are in (attached, or the
//! loader's code before the runtime is), X is marked when it ran before
//! and a block after it ran since (its own probe, put in after it ran,
//! said nothing: ld.so's `call_init` is now `+`); J, like a chain's block,
//! misses a run entered from a thread that was inside one of its two
//! when the probes went in.
//!
//! **No cycle.** A derived block's hit is read from others' at report
//! time ([`super::Plan::count`]), which may be derived in turn: a block
//! is derived only when the blocks read for the blocks it reads do not
//! lead back to it, and at most [`TREE`] blocks are read for any one (a
//! block read past that keeps its probe), so reading a hit takes a
//! bounded walk. The cache's check refuses a plan whose reading would
//! not end ([`super::Plan::hits_readable`]).

use iced_x86::{FlowControl, Instruction};

use rustc_hash::FxHashMap as HashMap;

use super::decode::Code;
use super::hits::{direct_target, insn_at, stops, Facts};
use super::{ends_flow, How, PlannedBlock};

/// The most blocks read for one block's hit (a hit-mode plan's derived
/// blocks: [`How::Implied`], [`How::Branches`]).
pub const TREE: usize = 64;

const NONE: u32 = u32::MAX;

/// The dominator tree of a module's blocks, by interval: block `x`
/// dominates block `s` when `s`'s interval lies within `x`'s.
pub(super) struct Dominators {
    /// Per block: its place in a walk of the tree, and the end of its
    /// subtree there (`NONE` where the root does not reach it).
    at: Vec<(u32, u32)>,
}

/// Nodes and their edges, each node's in one row of a table.
struct Graph {
    start: Vec<u32>,
    to: Vec<u32>,
}

impl Graph {
    /// The graph of `n` nodes with the edges `edges` (from, to).
    fn new(n: usize, edges: &[(u32, u32)]) -> Graph {
        let mut start = vec![0u32; n + 1];
        for &(v, _) in edges {
            start[v as usize + 1] += 1;
        }
        for v in 0..n {
            start[v + 1] += start[v];
        }
        let mut fill = start.clone();
        let mut to = vec![0u32; edges.len()];
        for &(v, w) in edges {
            to[fill[v as usize] as usize] = w;
            fill[v as usize] += 1;
        }
        Graph { start, to }
    }

    fn of(&self, v: u32) -> &[u32] {
        &self.to[self.start[v as usize] as usize..self.start[v as usize + 1] as usize]
    }
}

impl Dominators {
    pub(super) fn new(blocks: &[PlannedBlock], f: &Facts) -> Dominators {
        let n = blocks.len();
        let root = n as u32;
        let at_start = |t: u64| blocks.binary_search_by_key(&t, |b| b.start).ok();
        // Edges, from each block, and from the root.
        let mut edges: Vec<(u32, u32)> = Vec::with_capacity(2 * n);
        let mut entered = vec![false; n];
        for (i, b) in blocks.iter().enumerate() {
            if f.entered.contains(&b.start) || f.scope.unresolved_at(b.start) {
                entered[i] = true;
            }
            let Some(last) = b.insns.last().and_then(|a| insn_at(f.code, a)) else {
                // Where control goes is not known: the next block may be
                // entered from here.
                if i + 1 < n {
                    entered[i + 1] = true;
                }
                continue;
            };
            let mut to = |t: u64| match at_start(t) {
                Some(k) => edges.push((i as u32, k as u32)),
                None => {
                    // Into the middle of a block: that block is entered
                    // where it is not known.
                    let k = blocks.partition_point(|x| x.end <= t);
                    if k < n && blocks[k].start <= t {
                        entered[k] = true;
                    }
                }
            };
            if let Some(t) = direct_target(last) {
                to(t);
            }
            if !ends_flow(last) {
                to(b.end);
            }
        }
        let mut has_way = vec![false; n];
        for &(_, w) in &edges {
            has_way[w as usize] = true;
        }
        for i in 0..n {
            if entered[i] || !has_way[i] {
                edges.push((root, i as u32));
            }
        }
        // Depth-first from the root: reverse postorder. Blocks it does
        // not reach (a cycle with no way in) are entered from outside too.
        let (succ, post, order) = loop {
            let succ = Graph::new(n + 1, &edges);
            let (post, order) = postorder(&succ, root);
            let unseen: Vec<u32> = (0..n as u32)
                .filter(|&i| post[i as usize] == NONE)
                .collect();
            if unseen.is_empty() {
                break (succ, post, order);
            }
            edges.extend(unseen.into_iter().map(|i| (root, i)));
        };
        // Renumbered in reverse postorder (the root 0): a node's
        // dominators come before it, and the walks up the tree below stay
        // in few cache lines.
        let rank = |v: u32| (order.len() as u32 - 1) - post[v as usize];
        let into = Graph::new(
            order.len(),
            &order
                .iter()
                .flat_map(|&v| succ.of(v).iter().map(move |&w| (rank(w), rank(v))))
                .collect::<Vec<_>>(),
        );
        drop(succ);
        let mut idom = vec![NONE; order.len()];
        idom[0] = 0;
        let intersect = |idom: &[u32], mut a: u32, mut b: u32| {
            while a != b {
                while a > b {
                    a = idom[a as usize];
                }
                while b > a {
                    b = idom[b as usize];
                }
            }
            a
        };
        let mut changed = true;
        while changed {
            changed = false;
            for v in 1..order.len() as u32 {
                let mut new = NONE;
                for &p in into.of(v) {
                    if idom[p as usize] != NONE {
                        new = if new == NONE {
                            p
                        } else {
                            intersect(&idom, p, new)
                        };
                    }
                }
                if idom[v as usize] != new {
                    idom[v as usize] = new;
                    changed = true;
                }
            }
        }
        // The tree, walked from the root.
        let kids = Graph::new(
            order.len(),
            &(1..order.len() as u32)
                .map(|v| (idom[v as usize], v))
                .collect::<Vec<_>>(),
        );
        let mut by_rank = vec![(NONE, NONE); order.len()];
        let mut clock = 0u32;
        let mut stack: Vec<(u32, usize)> = vec![(0, 0)];
        by_rank[0].0 = clock;
        while let Some(&mut (v, ref mut k)) = stack.last_mut() {
            if let Some(&w) = kids.of(v).get(*k) {
                *k += 1;
                clock += 1;
                by_rank[w as usize].0 = clock;
                stack.push((w, 0));
            } else {
                by_rank[v as usize].1 = clock;
                stack.pop();
            }
        }
        let at = (0..n as u32).map(|v| by_rank[rank(v) as usize]).collect();
        Dominators { at }
    }

    /// Whether block `x` dominates block `s`, `s` not `x` itself.
    pub(super) fn strictly(&self, x: usize, s: usize) -> bool {
        let (a, b) = (self.at[x], self.at[s]);
        x != s && a.0 != NONE && b.0 != NONE && a.0 < b.0 && b.1 <= a.1
    }
}

/// Per node, its place in a postorder walk from `root` (`NONE` where the
/// walk does not reach it), and the nodes in reverse postorder.
fn postorder(succ: &Graph, root: u32) -> (Vec<u32>, Vec<u32>) {
    let n = succ.start.len() - 1;
    let mut post = vec![NONE; n];
    let mut order: Vec<u32> = Vec::with_capacity(n);
    let mut seen = vec![false; n];
    let mut stack: Vec<(u32, usize)> = vec![(root, 0)];
    seen[root as usize] = true;
    while let Some(&mut (v, ref mut k)) = stack.last_mut() {
        if let Some(&w) = succ.of(v).get(*k) {
            *k += 1;
            if !seen[w as usize] {
                seen[w as usize] = true;
                stack.push((w, 0));
            }
        } else {
            post[v as usize] = order.len() as u32;
            order.push(v);
            stack.pop();
        }
    }
    order.reverse();
    (post, order)
}

/// The blocks read for block `k`'s hit, given the derivations so far
/// (`out`, else the block's own `how`): whether `x` is not among them and
/// they are at most `budget` (taken from it).
fn reads_without(
    out: &[Option<How>],
    blocks: &[PlannedBlock],
    k: usize,
    x: usize,
    budget: &mut usize,
) -> bool {
    let mut todo: Vec<usize> = Vec::with_capacity(8);
    todo.push(k);
    while let Some(k) = todo.pop() {
        if k == x || *budget == 0 {
            return false;
        }
        *budget -= 1;
        match out[k].unwrap_or(blocks[k].how) {
            How::Implied { by } => todo.push(by as usize),
            How::Branches { taken, fell } => todo.extend([taken as usize, fell as usize]),
            How::None => return false,
            _ => {}
        }
    }
    true
}

/// Block `b`'s instructions, decoded (one search, where `hits.rs`'s
/// `insn_at` searches for each).
pub(super) fn insns_of<'a>(b: &PlannedBlock, code: &'a Code) -> Option<&'a [Instruction]> {
    let k = code
        .insns
        .binary_search_by_key(&b.insns.first()?, Instruction::ip)
        .ok()?;
    let x = code.insns.get(k..k + b.insns.len())?;
    x.iter()
        .zip(&b.insns)
        .all(|(x, a)| x.ip() == a)
        .then_some(x)
}

/// Where block `b` goes on, once entered, when it runs to its end and
/// leaves by a direct jump, a conditional one or by falling through (its
/// one or two ways on); else `None`.
fn goes_on(b: &PlannedBlock, f: &Facts) -> Option<[Option<u64>; 2]> {
    let (last, before) = insns_of(b, f.code)?.split_last()?;
    let plain = |x: &Instruction| x.flow_control() == FlowControl::Next && !stops(x);
    if stops(last) || f.scope.unresolved_at(b.start) || !before.iter().all(plain) {
        return None;
    }
    match last.flow_control() {
        FlowControl::Next => Some([Some(b.end), None]),
        FlowControl::UnconditionalBranch => Some([Some(direct_target(last)?), None]),
        FlowControl::ConditionalBranch => match direct_target(last)? {
            t if t == b.end => Some([Some(t), None]),
            t => Some([Some(t), Some(b.end)]),
        },
        _ => None,
    }
}

/// Derive, by the rule above, each block that has a probe of its own and
/// no derivation yet (`free`: what the encoder needs of it allows it),
/// into `out`.
pub(super) fn from_dominated(
    blocks: &[PlannedBlock],
    f: &Facts,
    ways: &HashMap<u64, u32>,
    free: impl Fn(usize) -> bool,
    out: &mut [Option<How>],
) {
    let dom = Dominators::new(blocks, f);
    let at_start = |t: u64| blocks.binary_search_by_key(&t, |b| b.start).ok();
    // Per block, the one or two blocks it goes on to (`goes_on`; the
    // second NONE if one), or NONE, NONE if it does not go on so.
    let on: Vec<[u32; 2]> = blocks
        .iter()
        .map(|b| {
            let block = |t: Option<u64>| t.map(|t| at_start(t).map_or(NONE, |k| k as u32));
            match goes_on(b, f) {
                Some([t, u]) => match (block(t), block(u)) {
                    (Some(NONE), _) | (_, Some(NONE)) => [NONE; 2],
                    (Some(k), l) => [k, l.unwrap_or(NONE)],
                    (None, _) => [NONE; 2],
                },
                None => [NONE; 2],
            }
        })
        .collect();
    let before = out.to_vec();
    for x in 0..blocks.len() {
        let [t, u] = on[x];
        if t == NONE || out[x].is_some() || !free(x) {
            continue;
        }
        let mut budget = TREE - 1;
        let ok = [t, u].iter().all(|&s| {
            s == NONE
                || (dom.strictly(x, s as usize)
                    && reads_without(out, blocks, s as usize, x, &mut budget))
        });
        if !ok {
            continue;
        }
        out[x] = Some(if u == NONE {
            How::Implied { by: t }
        } else {
            How::Branches { taken: t, fell: u }
        });
    }
    // A block entered by two ways alone, from blocks that run to their
    // end and go on to it alone: it ran exactly when one of them did.
    let mut from: Vec<[u32; 3]> = vec![[NONE; 3]; blocks.len()];
    for (p, &[j, u]) in on.iter().enumerate() {
        if j != NONE && u == NONE {
            if let Some(e) = from[j as usize].iter_mut().find(|e| **e == NONE) {
                *e = p as u32;
            }
        }
    }
    for (j, b) in blocks.iter().enumerate() {
        let [p, q, NONE] = from[j] else { continue };
        if q == NONE {
            continue;
        }
        let (p, q) = (p as usize, q as usize);
        // (Nor from the block before, if where it goes is not known.)
        let unknown_before = j > 0
            && blocks[j - 1]
                .insns
                .last()
                .and_then(|a| insn_at(f.code, a))
                .is_none();
        let alone = ways.get(&b.start) == Some(&2)
            && !f.entered.contains(&b.start)
            && !f.scope.unresolved_at(b.start)
            && !unknown_before;
        if !alone || p == q || p == j || q == j || out[j].is_some() || !free(j) {
            continue;
        }
        let mut budget = TREE - 1;
        if reads_without(out, blocks, p, j, &mut budget)
            && reads_without(out, blocks, q, j, &mut budget)
        {
            out[j] = Some(How::Branches {
                taken: p as u32,
                fell: q as u32,
            });
        }
    }
    // However the blocks were taken, no hit reads more than TREE others
    // (a block read past that keeps its probe), and none leads back to
    // itself (else none of this rule's derivations is kept).
    let how = |k: usize| out[k].unwrap_or(blocks[k].how);
    match sizes(blocks.len(), how, |k| before[k].is_none()) {
        Some(cut) => {
            for k in cut {
                out[k] = None;
            }
        }
        None => out.copy_from_slice(&before),
    }
}

impl super::Plan {
    /// Whether every implied or branching block's hit can be read: only
    /// in a hit-mode plan, from blocks in range that are counted, with no
    /// cycle and at most [`TREE`] blocks read for any one (what the
    /// cache's check asks of a plan it reads).
    pub(crate) fn hits_readable(&self) -> bool {
        let how = |k: usize| self.blocks[k].how;
        let derives = self.blocks.iter().any(|b| reads(b.how) != [None, None]);
        !derives || (self.mode.hits() && sizes(self.blocks.len(), how, |_| false).is_some())
    }
}

/// The blocks read for the hit of a block planned so.
fn reads(how: How) -> [Option<usize>; 2] {
    match how {
        How::Implied { by } => [Some(by as usize), None],
        How::Branches { taken, fell } => [Some(taken as usize), Some(fell as usize)],
        _ => [None, None],
    }
}

/// Whether every block's hit can be read (`how`: each of the `n`
/// blocks' plan): from blocks in range that are counted, with no cycle,
/// and at most [`TREE`] blocks read for it (itself included, as often as
/// the reading meets them). A block read past that, if `may_cut` allows,
/// is cut: taken to read none (it keeps a probe of its own), and counts
/// as one; else the blocks it reads are, if allowed (the blocks read
/// before for others are then counted as they were: more than they are).
/// The blocks cut; `None` if the reading cannot be bounded so.
fn sizes(
    n: usize,
    how: impl Fn(usize) -> How,
    may_cut: impl Fn(usize) -> bool,
) -> Option<Vec<usize>> {
    const TODO: u8 = u8::MAX;
    const UNDER_WAY: u8 = 0;
    let mut cut: Vec<usize> = Vec::new();
    let mut is_cut = vec![false; n];
    let reads_of = |k: usize, is_cut: &[bool]| {
        if is_cut[k] {
            [None, None]
        } else {
            reads(how(k))
        }
    };
    // Per block, the blocks read for its hit, once known (at most TREE).
    let mut size: Vec<u8> = vec![TODO; n];
    let mut stack: Vec<(usize, bool)> = Vec::new();
    for i in 0..n {
        if size[i] != TODO {
            continue;
        }
        if reads_of(i, &is_cut) == [None, None] {
            size[i] = 1;
            continue;
        }
        stack.push((i, false));
        while let Some((k, after)) = stack.pop() {
            if after {
                let total = |is_cut: &[bool], size: &[u8]| {
                    1 + reads_of(k, is_cut)
                        .into_iter()
                        .flatten()
                        .map(|w| usize::from(size[w]))
                        .sum::<usize>()
                };
                let mut t = total(&is_cut, &size);
                if t > TREE && may_cut(k) {
                    is_cut[k] = true;
                    cut.push(k);
                    t = 1;
                } else if t > TREE {
                    // Not this one: the blocks it reads, then.
                    for w in reads_of(k, &is_cut).into_iter().flatten() {
                        if size[w] > 1 && may_cut(w) {
                            is_cut[w] = true;
                            cut.push(w);
                            size[w] = 1;
                        }
                    }
                    t = total(&is_cut, &size);
                    if t > TREE {
                        return None;
                    }
                }
                size[k] = t as u8;
                continue;
            }
            match size[k] {
                UNDER_WAY => return None, // a cycle
                TODO => {}
                _ => continue,
            }
            size[k] = UNDER_WAY;
            stack.push((k, true));
            for w in reads_of(k, &is_cut).into_iter().flatten() {
                if w >= n || matches!(how(w), How::None) {
                    return None;
                }
                stack.push((w, false));
            }
        }
    }
    Some(cut)
}

#[cfg(test)]
mod tests {
    use crate::plan::testing::asm;
    use crate::plan::{How, Mode, Plan};

    /// `guard: test; jle out | body: add; dec; jnz body | out: ret`: the
    /// body is entered from the guard and from itself, `out` from the
    /// guard and the body. The guard dominates both: it ran exactly when
    /// one of them did.
    fn guarded_loop() -> Vec<u8> {
        asm(0x1000, |a| {
            use iced_x86::code_asm::*;
            let mut body = a.create_label();
            let mut out = a.create_label();
            a.test(edi, edi).unwrap();
            a.jle(out).unwrap();
            a.set_label(&mut body).unwrap();
            a.add(eax, ecx).unwrap();
            a.add(eax, edx).unwrap();
            a.dec(edi).unwrap();
            a.jne(body).unwrap();
            a.set_label(&mut out).unwrap();
            a.add(eax, 7).unwrap();
            a.ret().unwrap();
        })
    }

    #[test]
    fn a_loops_guard_ran_when_the_loop_or_its_way_out_did() {
        let p = Plan::new_in(
            Mode::Hits,
            vec![(0x1000, guarded_loop())],
            &[0x1000],
            &[],
            &[],
        );
        assert_eq!(p.blocks.len(), 3, "{:?}", p.blocks);
        assert_eq!(
            p.blocks[0].how,
            How::Branches { taken: 2, fell: 1 },
            "{:?}",
            p.blocks
        );
        assert_eq!(p.probes(), 2);
        for (c, ran) in [
            ([0, 0, 0], 0),
            ([0, 1, 0], 1),
            ([0, 0, 1], 1),
            ([0, 1, 1], 1),
        ] {
            assert_eq!(p.count(0, &c), ran, "{c:?}");
        }
        assert!(p.hits_readable());
    }

    /// `x: test; je b | call f | p: mov; jmp j | b: call f | q: mov | j:
    /// add; ret`: `j` is entered from `p` and `q` alone, each after a
    /// call (so no region of `x` reaches it): it ran exactly when one of
    /// them did. Neither `p` nor `q` dominates `j`: both keep probes.
    #[test]
    fn a_block_entered_from_two_that_go_on_to_it_alone() {
        let bytes = asm(0x1000, |a| {
            use iced_x86::code_asm::*;
            let mut b = a.create_label();
            let mut j = a.create_label();
            let mut f = a.create_label();
            a.test(edi, edi).unwrap();
            a.je(b).unwrap();
            a.call(f).unwrap();
            a.mov(eax, 1).unwrap();
            a.add(eax, ecx).unwrap();
            a.jmp(j).unwrap();
            a.set_label(&mut b).unwrap();
            a.call(f).unwrap();
            a.mov(eax, 2).unwrap();
            a.add(eax, edx).unwrap();
            a.set_label(&mut j).unwrap();
            a.add(eax, 7).unwrap();
            a.add(eax, esi).unwrap();
            a.ret().unwrap();
            a.set_label(&mut f).unwrap();
            a.mov(ecx, 3).unwrap();
            a.add(ecx, edx).unwrap();
            a.ret().unwrap();
        });
        let p = Plan::new_in(Mode::Hits, vec![(0x1000, bytes)], &[0x1000], &[], &[]);
        let at = |a: u64| p.blocks.iter().position(|b| b.start == a).unwrap();
        let starts: Vec<u64> = p.blocks.iter().map(|b| b.start).collect();
        // x, call, p, b (call), q, j, f.
        assert_eq!(starts.len(), 7, "{:?}", p.blocks);
        let (pb, qb, j) = (2, 4, 5);
        assert_eq!(at(starts[j]), j);
        assert_eq!(
            p.blocks[j].how,
            How::Branches {
                taken: pb as u32,
                fell: qb as u32
            },
            "{:?}",
            p.blocks
        );
        assert_eq!(p.blocks[pb].how, How::Once);
        assert_eq!(p.blocks[qb].how, How::Once);
        let mut c = vec![0u64; p.blocks.len()];
        assert_eq!(p.count(j, &c), 0);
        c[qb] = 1;
        assert_eq!(p.count(j, &c), 1);
        assert!(p.hits_readable());
    }

    /// However long a run of blocks each read through the next, no hit
    /// is read through more than TREE blocks: blocks past that are made
    /// to read none (keep their probes), and a cycle is refused.
    #[test]
    fn no_hit_is_read_through_more_than_tree_blocks() {
        use super::{sizes, TREE};
        let n = 3 * TREE + 5;
        let chain = || -> Vec<How> {
            (0..n)
                .map(|i| {
                    if i + 1 == n {
                        How::Once
                    } else {
                        How::Implied { by: i as u32 + 1 }
                    }
                })
                .collect()
        };
        let how = chain();
        let cut = sizes(n, |k| how[k], |_| true).unwrap();
        assert_eq!(cut.len(), (n - 1) / TREE);
        // Each block's reading, walked: at most TREE blocks.
        for i in 0..n {
            let (mut k, mut read) = (i, 1);
            while let (How::Implied { by }, false) = (how[k], cut.contains(&k)) {
                k = by as usize;
                read += 1;
            }
            assert!(read <= TREE, "{i}: {read}");
        }
        // Nothing may be cut: refused.
        assert_eq!(sizes(n, |k| how[k], |_| false), None);
        // A cycle: refused, whatever may be cut.
        let mut cycle = chain();
        cycle[n - 1] = How::Implied { by: 0 };
        assert_eq!(sizes(n, |k| cycle[k], |_| true), None);
        // A block read from one that reads none.
        let mut none = chain();
        none[3] = How::None;
        assert_eq!(sizes(n, |k| none[k], |_| true), None);
    }
}
