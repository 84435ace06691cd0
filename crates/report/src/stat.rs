//! `profdev stat`'s text: the devices' `stat/` files (`name value`
//! lines) as a table (keys down, devices across) or one JSON object.

use std::fmt::Write as _;

/// One device's (or the agent's) name and its `name value` lines.
pub type Device = (String, Vec<(String, String)>);

/// `name value` lines; a line without a value keeps an empty one.
pub fn parse(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (k, v) = l.split_once(' ').unwrap_or((l, ""));
            (k.to_string(), v.trim().to_string())
        })
        .collect()
}

/// Keys down, devices across; keys in the first device's order, then any
/// another adds.
pub fn table(devices: &[Device]) -> String {
    let mut keys: Vec<&str> = Vec::new();
    for (_, pairs) in devices {
        for (k, _) in pairs {
            if !keys.contains(&k.as_str()) {
                keys.push(k);
            }
        }
    }
    let key_width = keys.iter().map(|k| k.len()).max().unwrap_or(0).max(3);
    let value = |d: &Device, k: &str| -> String {
        d.1.iter()
            .find(|(kk, _)| kk == k)
            .map_or_else(|| "-".to_string(), |(_, v)| v.clone())
    };
    let widths: Vec<usize> = devices
        .iter()
        .map(|d| {
            keys.iter()
                .map(|k| value(d, k).len())
                .chain([d.0.len()])
                .max()
                .unwrap_or(1)
        })
        .collect();
    let mut s = format!("{:<key_width$}", "key");
    for (d, w) in devices.iter().zip(&widths) {
        let _ = write!(s, "  {:>w$}", d.0);
    }
    s.push('\n');
    for k in &keys {
        let _ = write!(s, "{k:<key_width$}");
        for (d, w) in devices.iter().zip(&widths) {
            let _ = write!(s, "  {:>w$}", value(d, k));
        }
        s.push('\n');
    }
    s
}

/// `{"kprof": {"state": "on", "samples": 12, ...}, ...}`: values that are
/// decimal numbers are JSON numbers, the others strings.
pub fn json(devices: &[Device]) -> String {
    let mut s = String::from("{");
    for (i, (name, pairs)) in devices.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "\n  {}: {{", json_string(name));
        for (j, (k, v)) in pairs.iter().enumerate() {
            if j > 0 {
                s.push(',');
            }
            let value = if !v.is_empty() && v.len() < 20 && v.bytes().all(|b| b.is_ascii_digit()) {
                v.trim_start_matches('0').to_string()
            } else {
                json_string(v)
            };
            let value = if value.is_empty() { "0".into() } else { value };
            let _ = write!(s, "\n    {}: {value}", json_string(k));
        }
        s.push_str("\n  }");
    }
    s.push_str("\n}\n");
    s
}

/// A JSON string literal.
fn json_string(v: &str) -> String {
    let mut s = String::from("\"");
    for c in v.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(s, "\\u{:04x}", c as u32);
            }
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn devices() -> Vec<Device> {
        vec![
            (
                "kprof".into(),
                parse("state on\nsamples 1200\nlost 0\nuptime_ms 007\n"),
            ),
            (
                "gmon".into(),
                parse("state error\nsamples 3\nnote a \"b\"\n"),
            ),
        ]
    }

    #[test]
    fn table_has_a_row_per_key_and_a_column_per_device() {
        let t = table(&devices());
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0].split_whitespace().collect::<Vec<_>>(),
            ["key", "kprof", "gmon"]
        );
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            ["state", "on", "error"]
        );
        assert_eq!(
            lines[2].split_whitespace().collect::<Vec<_>>(),
            ["samples", "1200", "3"]
        );
        assert_eq!(
            lines[3].split_whitespace().collect::<Vec<_>>(),
            ["lost", "0", "-"]
        );
        assert_eq!(lines.len(), 6);
    }

    #[test]
    fn json_numbers_and_escaped_strings() {
        let j = json(&devices());
        assert!(j.contains("\"samples\": 1200"), "{j}");
        assert!(j.contains("\"uptime_ms\": 7"), "{j}");
        assert!(j.contains("\"lost\": 0"), "{j}");
        assert!(j.contains("\"state\": \"on\""), "{j}");
        assert!(j.contains("\"note\": \"a \\\"b\\\"\""), "{j}");
        assert_eq!(json_string("a\nb"), "\"a\\u000ab\"");
    }
}
