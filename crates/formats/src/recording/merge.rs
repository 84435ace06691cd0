//! Several recordings as one: what `profdev report --since` and `profdev
//! export --since` read from the agent's store, one recording per
//! interval. The recordings come from one recorder (their samples' times
//! on one clock), oldest first; their tables are put end to end, an
//! object given by several (the same kind, device, inode, build id and
//! path) becoming one whose symbol tables are merged as [`super::read`]
//! merges a function given twice.

use super::{Object, ObjectInfo, Recording};
use std::collections::HashMap;

/// `recs` as one recording, in their order: every task, sample, stack and
/// loss of each; the objects made one by their identity; the header of
/// the earliest start (flags of any, the period when all agree, else 0);
/// complete when every one is, its End the sum of theirs. A recording's
/// torn tail is its reader's to report; the merge has none.
pub fn merge(recs: Vec<Recording>) -> Recording {
    let mut out = Recording {
        complete: !recs.is_empty() && recs.iter().all(|r| r.complete),
        ..Recording::default()
    };
    if let Some(first) = recs.first() {
        out.header = first.header;
        out.header.start_ns = recs.iter().map(|r| r.header.start_ns).min().unwrap_or(0);
        out.header.flags = recs.iter().fold(0, |f, r| f | r.header.flags);
        if recs
            .iter()
            .any(|r| r.header.period_ns != first.header.period_ns)
        {
            out.header.period_ns = 0;
        }
        if recs.iter().all(|r| r.end.is_some()) {
            let mut end = super::End::default();
            for e in recs.iter().filter_map(|r| r.end) {
                end.samples += e.samples;
                end.lost += e.lost;
            }
            out.end = Some(end);
        }
    }
    let mut ids: HashMap<ObjectInfo, u32> = HashMap::new();
    for rec in recs {
        // This recording's object ids to the merged ones (index id - 1).
        let mut remap = Vec::with_capacity(rec.objects.len());
        for o in rec.objects {
            let id = *ids.entry(o.info.clone()).or_insert_with(|| {
                out.objects.push(Object {
                    id: out.objects.len() as u32 + 1,
                    info: o.info.clone(),
                    ..Object::default()
                });
                out.objects.len() as u32
            });
            let into = &mut out.objects[id as usize - 1];
            let base = into.files.len() as u32;
            into.files.extend(o.files);
            into.functions.extend(o.functions.into_iter().map(|mut f| {
                for l in &mut f.lines {
                    l.file += base;
                }
                f
            }));
            remap.push(id);
        }
        let (tasks, frames, stacks) = (
            out.tasks.len() as u32,
            out.frames.len(),
            out.stacks.len() as u32,
        );
        out.tasks.extend(rec.tasks);
        out.frames.extend(rec.frames.into_iter().map(|mut f| {
            if f.object != 0 {
                f.object = remap[f.object as usize - 1];
            }
            f
        }));
        out.stacks
            .extend(rec.stacks.into_iter().map(|(first, d)| (first + frames, d)));
        out.samples.extend(rec.samples.into_iter().map(|mut s| {
            s.task += tasks;
            s.first += frames;
            s.stack += stacks;
            s
        }));
        out.losses.extend(rec.losses);
    }
    for o in &mut out.objects {
        super::read::merge_functions(o);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::tests::sample_bytes;
    use super::super::*;

    /// Two intervals' recordings of one recorder: every sample of both,
    /// named as each names it alone; the objects they share made one.
    #[test]
    fn two_recordings_read_as_one() {
        let a = read(&sample_bytes()).unwrap();
        let mut b = a.clone();
        b.header.start_ns -= 5;
        // The second holds another object first, so that ids differ.
        let mut other = b.objects[0].clone();
        other.info.path = "/usr/lib/other.so".into();
        b.objects.insert(0, other);
        for (i, o) in b.objects.iter_mut().enumerate() {
            o.id = i as u32 + 1;
        }
        for f in &mut b.frames {
            if f.object != 0 {
                f.object += 1;
            }
        }
        let m = merge(vec![a.clone(), b.clone()]);
        assert_eq!(m.samples.len(), a.samples.len() + b.samples.len());
        assert_eq!(m.tasks.len(), a.tasks.len() + b.tasks.len());
        assert_eq!(m.objects.len(), a.objects.len() + 1);
        assert_eq!(m.header.start_ns, b.header.start_ns);
        assert_eq!(m.header.period_ns, a.header.period_ns);
        assert_eq!(m.lost(), a.lost() + b.lost());
        assert_eq!(m.complete, a.complete);
        let name = |r: &Recording, i: usize| -> Vec<(String, String)> {
            let s = &r.samples[i];
            r.stack(s)
                .iter()
                .map(|f| match r.object(f.object) {
                    Some(o) => {
                        let func = o.function_at(f.offset).map(|f| f.name.clone());
                        (o.info.path.clone(), func.unwrap_or_default())
                    }
                    None => (String::new(), format!("{:#x}", f.offset)),
                })
                .collect()
        };
        for i in 0..a.samples.len() {
            assert_eq!(name(&m, i), name(&a, i));
            assert_eq!(name(&m, a.samples.len() + i), name(&b, i));
            assert_eq!(m.task(&m.samples[i]), a.task(&a.samples[i]));
        }
        // The shared object's functions are not doubled.
        let prog = |r: &Recording| {
            let o = r.objects.iter().find(|o| o.info.path == "/usr/bin/prog");
            o.unwrap().functions.clone()
        };
        assert_eq!(prog(&m), prog(&a));
        assert_eq!(merge(Vec::new()), Recording::default());
    }
}
