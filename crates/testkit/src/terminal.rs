//! A command on a pseudo-terminal: script(1) gives it one, its output is
//! gathered as it comes, and its keyboard is the pipe to script's stdin.
//! Every wait is bounded; a failed test leaves nothing running.

use crate::wait_until;
use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// A shell command line run by `script -qfec` on a pseudo-terminal.
pub struct Terminal {
    script: Child,
    keys: ChildStdin,
    out: Arc<Mutex<Vec<u8>>>,
    reader: Option<JoinHandle<()>>,
}

impl Terminal {
    /// Start `command` (run by script's shell; `exec` it to make it
    /// script's child, and `stty rows R cols C;` first to size the screen).
    pub fn spawn(command: &str) -> Terminal {
        let mut script = Command::new("script")
            .args(["-qfec", command, "/dev/null"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("script(1) runs");
        let keys = script.stdin.take().expect("script's stdin");
        let mut pipe = script.stdout.take().expect("script's stdout");
        let out = Arc::new(Mutex::new(Vec::new()));
        let sink = out.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Terminal {
            script,
            keys,
            out,
            reader: Some(reader),
        }
    }

    /// Everything shown so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.out.lock().unwrap()).into_owned()
    }

    /// Wait (bounded) until the screen has shown `s` after byte `from`;
    /// returns the length of the output then.
    pub fn wait_for(&self, s: &str, from: usize) -> usize {
        wait_until(
            &format!("{s:?} on the screen"),
            Duration::from_secs(60),
            || self.text().get(from..).is_some_and(|t| t.contains(s)),
        );
        self.text().len()
    }

    /// Type `key`.
    pub fn press(&mut self, key: &str) {
        self.keys.write_all(key.as_bytes()).unwrap();
        self.keys.flush().unwrap();
    }

    /// Press `key` until the screen shows `s` after byte `from` (bounded),
    /// again about every 3 s: for a key that may not take the first time.
    pub fn press_until(&mut self, key: &str, s: &str, from: usize) -> usize {
        let mut polls = 0u32;
        let out = self.out.clone();
        let shown = move || {
            String::from_utf8_lossy(&out.lock().unwrap())
                .get(from..)
                .is_some_and(|t| t.contains(s))
        };
        wait_until(
            &format!("{s:?} on the screen after pressing {key:?}"),
            Duration::from_secs(60),
            || {
                if shown() {
                    return true;
                }
                // wait_until polls every 50 ms: again every 64 polls.
                if polls % 64 == 0 {
                    self.keys.write_all(key.as_bytes()).unwrap();
                    self.keys.flush().unwrap();
                }
                polls += 1;
                false
            },
        );
        self.text().len()
    }

    /// The pid of the command when script's shell exec'd it (script's child).
    pub fn child_pid(&self) -> Option<i32> {
        let children =
            std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", self.script.id()))
                .ok()?;
        children.split_whitespace().next()?.parse().ok()
    }

    /// Wait (bounded by `limit`) for the end: the command's exit code as
    /// script reports it, and everything shown.
    pub fn finish(mut self, limit: Duration) -> (Option<i32>, String) {
        let mut status = None;
        wait_until("the command on the terminal to end", limit, || {
            status = self.script.try_wait().unwrap();
            status.is_some()
        });
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        (status.and_then(|s| s.code()), self.text())
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        if self.script.try_wait().ok().flatten().is_none() {
            if let Some(pid) = self.child_pid().and_then(rustix::process::Pid::from_raw) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
            let _ = self.script.kill();
            let _ = self.script.wait();
        }
    }
}
