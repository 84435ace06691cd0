//! `FILE.partial`, appended to as the recording is made, then synced and
//! renamed to FILE (an existing FILE kept as `FILE.old`, as perf does).

use crate::Error;
use profdev_formats::recording::Encoder;
use std::path::{Path, PathBuf};

/// Mode of the recording: it holds kernel addresses.
const MODE: u32 = 0o600;

/// FILE.partial, appended to as records are made.
pub(crate) struct Partial {
    file: profdev_safefile::AppendFile,
    path: PathBuf,
    /// Bytes written so far.
    pub(crate) bytes: u64,
}

/// `FILE.partial`.
pub fn partial_path(output: &Path) -> PathBuf {
    let mut p = output.as_os_str().to_owned();
    p.push(".partial");
    PathBuf::from(p)
}

impl Partial {
    /// Create `output`'s `.partial` (0600, never through a link); one that
    /// exists is refused.
    pub(crate) fn create(output: &Path) -> Result<Partial, Error> {
        let path = partial_path(output);
        let file = profdev_safefile::create_append(&path, MODE).map_err(|e| {
            if e.already_exists() {
                Error(format!(
                    "{} exists (a recording that did not finish?): export it with 'profdev export FORMAT -i {}', or remove it",
                    path.display(),
                    path.display()
                ))
            } else {
                Error(e.to_string())
            }
        })?;
        Ok(Partial {
            file,
            path,
            bytes: 0,
        })
    }

    /// Append what `enc` has made since the last write.
    pub(crate) fn write(&mut self, enc: &mut Encoder) -> Result<(), Error> {
        let b = enc.take();
        if b.is_empty() {
            return Ok(());
        }
        self.file.append(&b).map_err(|e| Error(e.to_string()))?;
        self.bytes += b.len() as u64;
        Ok(())
    }

    /// Sync, keep an existing FILE as FILE.old, rename into place.
    pub(crate) fn finish(self, output: &Path) -> Result<(), Error> {
        self.file
            .file()
            .sync_all()
            .map_err(|e| Error(format!("cannot write {}: {e}", self.path.display())))?;
        if output.symlink_metadata().is_ok() {
            let mut old = output.as_os_str().to_owned();
            old.push(".old");
            std::fs::rename(output, &old)
                .map_err(|e| Error(format!("cannot rename {} to .old: {e}", output.display())))?;
        }
        std::fs::rename(&self.path, output).map_err(|e| {
            Error(format!(
                "cannot rename {} to {}: {e}",
                self.path.display(),
                output.display()
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profdev_formats::recording::Header;

    /// A recording is made as FILE.partial, which a second recording
    /// refuses to overwrite; finished, it replaces FILE, kept as FILE.old.
    #[test]
    fn partial_then_renamed_with_the_old_file_kept() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("profdev.data");
        std::fs::write(&out, b"before").unwrap();
        let mut p = Partial::create(&out).unwrap();
        let e = Partial::create(&out).err().unwrap().to_string();
        let pp = partial_path(&out);
        assert_eq!(
            e,
            format!(
                "{} exists (a recording that did not finish?): export it with \
                 'profdev export FORMAT -i {}', or remove it",
                pp.display(),
                pp.display()
            )
        );
        let mut enc = Encoder::new(&Header::default());
        p.write(&mut enc).unwrap();
        assert!(p.bytes > 0);
        let bytes = p.bytes;
        p.finish(&out).unwrap();
        assert_eq!(std::fs::metadata(&out).unwrap().len(), bytes);
        assert_eq!(
            std::fs::read(dir.path().join("profdev.data.old")).unwrap(),
            b"before"
        );
        assert!(!partial_path(&out).exists());
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&out).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}
