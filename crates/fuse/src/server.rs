//! The generic file server: any table of devices, served through fuser.

use crate::errno::errno;
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, IoctlFlags,
    KernelConfig, LockOwner, OpenAccMode, OpenFlags, PollEvents, PollFlags, PollNotifier,
    ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyOpen, ReplyPoll,
    ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use profdev_dev::{AccessRules, Chan, Cred, Dev, DevError, DirEntry, OpenMode, Qid};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

/// Where the server's log lines go (one line per call, no newline).
pub type Log = Arc<dyn Fn(&str) + Send + Sync>;

/// Why a device table cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServeError {
    /// Two devices put the same name at the mount root.
    #[error("devices {first} and {second} both put \"{name}\" at the mount root")]
    NameClash {
        name: String,
        first: &'static str,
        second: &'static str,
    },
    /// More devices than inode numbers can tell apart.
    #[error("{0} devices are more than the server can number (at most {MAX_DEVICES})")]
    TooManyDevices(usize),
}

/// Most devices one server can serve: the device index takes 16 bits of
/// an inode number.
pub const MAX_DEVICES: usize = (1 << 16) - 2;

/// Attributes and entries are never cached: a device's tree and lengths
/// may change between two calls (a histogram that grows, a directory of
/// processes), so the kernel asks again every time.
const TTL: Duration = Duration::ZERO;

/// Permission bits of the mount root, which belongs to no device.
pub(crate) const ROOT_PERM: u16 = 0o555;

// Inode numbers. 1 is the mount root. Any other is
//     (device index + 1) << 48  |  directory bit << 47  |  qid number
// so it is computed, not allocated: stable for as long as a device keeps its
// qids (across remounts too), and two files never share one. Qid numbers of
// 2^47 and above cannot be served (devices number files with small
// integers).
const DEV_SHIFT: u32 = 48;
const DIR_BIT: u64 = 1 << 47;
const NUMBER_MASK: u64 = DIR_BIT - 1;

/// What an inode number names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Node {
    Root,
    File { dev: usize, qid: Qid },
}

fn encode(dev: usize, qid: Qid) -> Option<u64> {
    if qid.number() > NUMBER_MASK || dev >= MAX_DEVICES {
        return None;
    }
    let dir = if qid.is_dir() { DIR_BIT } else { 0 };
    Some(((dev as u64 + 1) << DEV_SHIFT) | dir | qid.number())
}

fn decode(ino: u64) -> Option<Node> {
    if ino == INodeNo::ROOT.0 {
        return Some(Node::Root);
    }
    let dev = (ino >> DEV_SHIFT).checked_sub(1)? as usize;
    let number = ino & NUMBER_MASK;
    let qid = if ino & DIR_BIT != 0 {
        Qid::dir(number)
    } else {
        Qid::file(number)
    };
    Some(Node::File { dev, qid })
}

/// One open file: which device, the file's name (for the log), and the
/// device's channel. The channel is taken out on release.
struct OpenFile {
    dev: usize,
    name: String,
    chan: Mutex<Option<Chan>>,
}

/// A directory's entries, numbered, as one open of it lists them.
type Listing = Arc<Vec<(u64, DirEntry)>>;

/// Serves a device table as a file tree.
///
/// Devices whose [`Dev::dir_name`] is empty put their files at the mount
/// root; the others get a directory of that name there. Every open is
/// direct I/O, so each `read(2)` and `write(2)` reaches the device with its
/// own offset and size, whatever the file's length says. Files belong to
/// the user who mounted; their modes are the devices' (the kernel checks
/// them: the mount uses `default_permissions`), and every request to a
/// device is checked again, by its uid, against the mount's
/// [`AccessRules`] (see [`profdev_dev::access`]): EACCES for anyone but
/// root, the mounting user and the users and groups the mount names.
pub struct Server {
    devs: Vec<Arc<dyn Dev>>,
    rules: AccessRules,
    uid: u32,
    gid: u32,
    time: SystemTime,
    files: Mutex<HashMap<u64, Arc<OpenFile>>>,
    /// The listing of each open directory, taken at opendir: the readdir
    /// calls of one listing page through it, so listing n entries is O(n)
    /// and the pages agree with each other.
    listings: Mutex<HashMap<u64, Listing>>,
    next_fh: AtomicU64,
    log: Option<Log>,
}

impl Server {
    /// A server for `devs`, owned by the calling process's effective user.
    ///
    /// Fails if two devices put the same name at the root.
    pub fn new(devs: Vec<Arc<dyn Dev>>) -> Result<Self, ServeError> {
        if devs.len() > MAX_DEVICES {
            return Err(ServeError::TooManyDevices(devs.len()));
        }
        let uid = nix::unistd::geteuid().as_raw();
        let server = Server {
            devs,
            rules: AccessRules::owner_only(uid),
            uid,
            gid: nix::unistd::getegid().as_raw(),
            time: SystemTime::now(),
            files: Mutex::new(HashMap::new()),
            listings: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            log: None,
        };
        let mut seen: HashMap<String, &'static str> = HashMap::new();
        for (name, dev) in server.root_names() {
            if let Some(first) = seen.insert(name.clone(), dev) {
                return Err(ServeError::NameClash {
                    name,
                    first,
                    second: dev,
                });
            }
        }
        Ok(server)
    }

    /// Send log lines (failed control writes, devices that fail to list)
    /// to `log`. Without one the server logs nothing.
    pub fn with_log(mut self, log: Log) -> Self {
        self.log = Some(log);
        self
    }

    /// Who may use the mount besides root and the mounting user (by
    /// default, no one). A mount that names others shows each file's owner
    /// bits to group and others too, so that the kernel's mode check lets
    /// them reach this rule.
    pub fn with_access(mut self, rules: AccessRules) -> Self {
        self.rules = rules;
        self
    }

    /// The access rules.
    pub fn access(&self) -> &AccessRules {
        &self.rules
    }

    /// EACCES unless the request's user may use the mount.
    fn check(&self, req: &Request) -> Result<Cred, Errno> {
        let cred = cred(req);
        if self.rules.allows(&cred) {
            Ok(cred)
        } else {
            Err(Errno::EACCES)
        }
    }

    /// The names at the mount root, in order, each with its device's name.
    pub fn root_names(&self) -> Vec<(String, &'static str)> {
        let mut names = Vec::new();
        for dev in &self.devs {
            if dev.dir_name().is_empty() {
                for e in dev.gen(Qid::ROOT).unwrap_or_default() {
                    names.push((e.name, dev.name()));
                }
            } else {
                names.push((dev.dir_name().to_string(), dev.name()));
            }
        }
        names
    }

    /// Log one line. Whatever the devices put in it, it stays one line:
    /// control characters (newline, carriage return, ESC) are escaped as
    /// Rust escapes them (`\n`, `\u{1b}`), after the quoted parts were
    /// already escaped by [`quote`] and `{:?}`.
    fn log(&self, line: &str) {
        if let Some(log) = &self.log {
            log(&one_line(line));
        }
    }

    fn attr(&self, ino: u64, entry: &DirEntry) -> FileAttr {
        let (kind, nlink) = if entry.qid.is_dir() {
            (FileType::Directory, 2)
        } else {
            (FileType::RegularFile, 1)
        };
        FileAttr {
            ino: INodeNo(ino),
            size: entry.length,
            // Whole blocks, so that cp does not take the file for a sparse
            // one and go looking for holes.
            blocks: entry.length.div_ceil(512),
            atime: self.time,
            mtime: self.time,
            ctime: self.time,
            crtime: self.time,
            kind,
            perm: self.perm(entry.perm),
            nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    /// The mode shown: the device's, or with the owner's bits copied to
    /// group and others when the mount names other users (the server's
    /// check is then the rule).
    fn perm(&self, perm: u16) -> u16 {
        let perm = perm & 0o7777;
        if self.rules.names_others() {
            let owner = (perm >> 6) & 0o7;
            perm | (owner << 3) | owner
        } else {
            perm
        }
    }

    fn root_attr(&self) -> FileAttr {
        self.attr(INodeNo::ROOT.0, &DirEntry::dir("/", Qid::ROOT, ROOT_PERM))
    }

    /// The device and qid an inode names, if it names a device's file.
    /// A root device's own top directory is the mount root, not a file.
    fn file(&self, ino: INodeNo) -> Result<Node, Errno> {
        match decode(ino.0).ok_or(Errno::ENOENT)? {
            Node::Root => Ok(Node::Root),
            Node::File { dev, qid } => {
                let d = self.devs.get(dev).ok_or(Errno::ENOENT)?;
                if qid == Qid::ROOT && d.dir_name().is_empty() {
                    return Err(Errno::ENOENT);
                }
                Ok(Node::File { dev, qid })
            }
        }
    }

    /// The inode and entry of `dev`'s entry `e`, or ENOENT if its qid cannot
    /// be numbered.
    fn numbered(&self, dev: usize, e: DirEntry) -> Result<(u64, DirEntry), Errno> {
        match encode(dev, e.qid) {
            Some(ino) => Ok((ino, e)),
            None => {
                self.log(&format!(
                    "{}: {:?}: qid {:#x} is too large to serve",
                    self.devs[dev].name(),
                    e.name,
                    e.qid.raw()
                ));
                Err(Errno::ENOENT)
            }
        }
    }

    /// The entries of the directory `ino`, numbered.
    fn list(&self, ino: INodeNo) -> Result<Vec<(u64, DirEntry)>, Errno> {
        match self.file(ino)? {
            Node::Root => {
                let mut out = Vec::new();
                for (i, dev) in self.devs.iter().enumerate() {
                    let entries = if dev.dir_name().is_empty() {
                        match dev.gen(Qid::ROOT) {
                            Ok(es) => es,
                            Err(e) => {
                                self.log(&format!("{}: cannot list its files: {e}", dev.name()));
                                continue;
                            }
                        }
                    } else {
                        let perm = dev.stat(Qid::ROOT).map(|e| e.perm).unwrap_or(0o500);
                        vec![DirEntry::dir(dev.dir_name(), Qid::ROOT, perm)]
                    };
                    out.extend(entries.into_iter().filter_map(|e| self.numbered(i, e).ok()));
                }
                Ok(out)
            }
            Node::File { dev, qid } => {
                if !qid.is_dir() {
                    return Err(Errno::ENOTDIR);
                }
                let entries = self.devs[dev]
                    .gen(qid)
                    .map_err(|e| Errno::from_i32(errno(&e)))?;
                Ok(entries
                    .into_iter()
                    .filter_map(|e| self.numbered(dev, e).ok())
                    .collect())
            }
        }
    }

    /// The inode and entry named `name` in the directory `ino`. Below the
    /// mount root the device answers (`Dev::walk`), so a lookup need not
    /// list the directory: `ls -l` of a directory of n entries is O(n)
    /// lookups of O(log n) each, not O(n²).
    fn find(&self, ino: INodeNo, name: &OsStr) -> Result<(u64, DirEntry), Errno> {
        match self.file(ino)? {
            Node::Root => self
                .list(ino)?
                .into_iter()
                .find(|(_, e)| OsStr::new(&e.name) == name)
                .ok_or(Errno::ENOENT),
            Node::File { dev, qid } => {
                if !qid.is_dir() {
                    return Err(Errno::ENOTDIR);
                }
                let name = name.to_str().ok_or(Errno::ENOENT)?;
                let e = self.devs[dev]
                    .walk(qid, name)
                    .map_err(|e| Errno::from_i32(errno(&e)))?;
                self.numbered(dev, e)
            }
        }
    }

    fn stat(&self, ino: INodeNo) -> Result<FileAttr, Errno> {
        match self.file(ino)? {
            Node::Root => Ok(self.root_attr()),
            Node::File { dev, qid } => {
                let d = &self.devs[dev];
                let mut e = d.stat(qid).map_err(|e| Errno::from_i32(errno(&e)))?;
                if qid == Qid::ROOT {
                    e.name = d.dir_name().to_string();
                }
                Ok(self.attr(ino.0, &e))
            }
        }
    }

    fn open_file(&self, fh: FileHandle) -> Result<Arc<OpenFile>, Errno> {
        self.lock_files().get(&fh.0).cloned().ok_or(Errno::EBADF)
    }

    fn lock_listings(&self) -> MutexGuard<'_, HashMap<u64, Listing>> {
        self.listings.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_files(&self) -> MutexGuard<'_, HashMap<u64, Arc<OpenFile>>> {
        self.files.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Run `f` on the open file's channel, for the request `req`: checked
    /// against the access rules, its credentials put in the channel.
    fn with_chan<T>(
        &self,
        req: &Request,
        fh: FileHandle,
        f: impl FnOnce(&dyn Dev, &OpenFile, &mut Chan) -> Result<T, DevError>,
    ) -> Result<T, (Errno, Option<DevError>)> {
        let cred = self.check(req).map_err(|e| (e, None))?;
        let of = self.open_file(fh).map_err(|e| (e, None))?;
        let mut guard = of.chan.lock().unwrap_or_else(|p| p.into_inner());
        let chan = guard.as_mut().ok_or((Errno::EBADF, None))?;
        chan.cred = Some(cred);
        f(self.devs[of.dev].as_ref(), &of, chan).map_err(|e| (Errno::from_i32(errno(&e)), Some(e)))
    }
}

/// The credentials a FUSE request carries.
fn cred(req: &Request) -> Cred {
    Cred {
        uid: req.uid(),
        gid: req.gid(),
        pid: req.pid(),
    }
}

fn open_mode(flags: OpenFlags) -> OpenMode {
    match flags.acc_mode() {
        OpenAccMode::O_RDONLY => OpenMode::Read,
        OpenAccMode::O_WRONLY => OpenMode::Write,
        OpenAccMode::O_RDWR => OpenMode::ReadWrite,
    }
}

/// A control message as the log quotes it: at most 80 characters, one
/// trailing newline dropped, between double quotes with Rust's `{:?}`
/// escapes (a quote is `\"`, a newline `\n`, ESC `\u{1b}`), so that no
/// byte sequence in it ends the quote or the line.
fn quote(data: &[u8]) -> String {
    let text = profdev_dev::ctl::quoted(data);
    let mut short: String = text.chars().take(80).collect();
    if short.len() < text.len() {
        short.push_str("...");
    }
    format!("{short:?}")
}

/// `line` with every control character escaped: one log line, whatever
/// it holds.
fn one_line(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    for c in line.chars() {
        if c.is_control() {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    out
}

impl Filesystem for Server {
    fn init(&mut self, _req: &Request, _config: &mut KernelConfig) -> std::io::Result<()> {
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent != INodeNo::ROOT {
            if let Err(e) = self.check(req) {
                return reply.error(e);
            }
        }
        let found = self.find(parent, name);
        match found {
            Ok((ino, e)) => {
                // The length in a directory listing may be stale; stat is
                // the device's word on it.
                let attr = self
                    .stat(INodeNo(ino))
                    .unwrap_or_else(|_| self.attr(ino, &e));
                reply.entry(&TTL, &attr, Generation(0));
            }
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.stat(ino) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    /// Only truncation to 0 of a writable file is accepted, and it changes
    /// nothing: the shell truncates before `echo start >kpctl` writes.
    /// Times that come with it (the kernel sends mtime along) are ignored.
    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let attr = match self.stat(ino) {
            Ok(a) => a,
            Err(e) => return reply.error(e),
        };
        if let Err(e) = self.check(req) {
            return reply.error(e);
        }
        let truncate_only = mode.is_none() && uid.is_none() && gid.is_none() && flags.is_none();
        let writable = attr.kind == FileType::RegularFile && attr.perm & 0o222 != 0;
        if truncate_only && size == Some(0) && writable {
            reply.attr(&TTL, &attr);
        } else {
            reply.error(Errno::EPERM);
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let (dev, qid) = match self.file(ino) {
            Ok(Node::File { dev, qid }) => (dev, qid),
            Ok(Node::Root) => return reply.error(Errno::EISDIR),
            Err(e) => return reply.error(e),
        };
        if let Err(e) = self.check(req) {
            return reply.error(e);
        }
        let d = &self.devs[dev];
        let name = d.stat(qid).map(|e| e.name).unwrap_or_default();
        match d.open(qid, open_mode(flags)) {
            Ok(chan) => {
                let fopen = if chan.stream {
                    FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_STREAM
                } else {
                    FopenFlags::FOPEN_DIRECT_IO
                };
                let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
                let of = OpenFile {
                    dev,
                    name,
                    chan: Mutex::new(Some(chan)),
                };
                self.lock_files().insert(fh, Arc::new(of));
                reply.opened(FileHandle(fh), fopen);
            }
            Err(e) => reply.error(Errno::from_i32(errno(&e))),
        }
    }

    fn read(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.with_chan(req, fh, |d, _, c| d.read(c, offset, size)) {
            Ok(mut data) => {
                data.truncate(size as usize);
                reply.data(&data);
            }
            Err((e, _)) => reply.error(e),
        }
    }

    fn write(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut who = None;
        let result = self.with_chan(req, fh, |d, of, c| {
            who = Some((d.name(), of.name.clone()));
            d.write(c, offset, data)
        });
        match result {
            Ok(n) => reply.written(n.min(data.len()) as u32),
            Err((e, err)) => {
                if let (Some((dev, file)), Some(err)) = (who, err) {
                    let quoted = quote(data);
                    let why = err.to_string();
                    let line = if why.contains(&quoted) {
                        format!("{dev}: write to {file} failed: {why}")
                    } else {
                        format!("{dev}: write {quoted} to {file} failed: {why}")
                    };
                    self.log(&line);
                }
                reply.error(e);
            }
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let of = self.lock_files().remove(&fh.0);
        if let Some(of) = of {
            let chan = of.chan.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(chan) = chan {
                self.devs[of.dev].close(chan);
            }
        }
        reply.ok();
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // The mount root lists the device files to anyone; a device's own
        // directory (prof's modules) only to those the rules allow.
        if ino != INodeNo::ROOT {
            if let Err(e) = self.check(req) {
                return reply.error(e);
            }
        }
        match self.stat(ino) {
            Ok(a) if a.kind == FileType::Directory => {}
            Ok(_) => return reply.error(Errno::ENOTDIR),
            Err(e) => return reply.error(e),
        }
        match self.list(ino) {
            Ok(entries) => {
                let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
                self.lock_listings().insert(fh, Arc::new(entries));
                reply.opened(FileHandle(fh), FopenFlags::empty())
            }
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.lock_listings().remove(&fh.0);
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let listed = self.lock_listings().get(&fh.0).cloned();
        let entries = match listed.map_or_else(|| self.list(ino).map(Arc::new), Ok) {
            Ok(es) => es,
            Err(e) => return reply.error(e),
        };
        // ".." of a nested directory is given as the root: the kernel
        // resolves ".." itself and only ls -i would notice.
        let dots = [
            (ino.0, FileType::Directory, "."),
            (INodeNo::ROOT.0, FileType::Directory, ".."),
        ];
        let all = dots.into_iter().chain(entries.iter().map(|(i, e)| {
            let kind = if e.qid.is_dir() {
                FileType::Directory
            } else {
                FileType::RegularFile
            };
            (*i, kind, e.name.as_str())
        }));
        for (k, (i, kind, name)) in all.enumerate().skip(offset as usize) {
            if reply.add(INodeNo(i), k as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        // Not reached: the patched fuser calls ioctl_with_arg.
        self.ioctl_with_arg(req, ino, fh, flags, cmd, 0, in_data, out_size, reply);
    }

    fn ioctl_with_arg(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        arg: u64,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        match self.with_chan(req, fh, |d, _, c| d.ioctl(c, cmd, arg, in_data, out_size)) {
            Ok((result, mut out)) => {
                out.truncate(out_size as usize);
                reply.ioctl(result, &out);
            }
            Err((e, _)) => reply.error(e),
        }
    }

    /// Always ready for whatever the open mode allows: no device blocks.
    fn poll(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _ph: PollNotifier,
        events: PollEvents,
        _flags: PollFlags,
        reply: ReplyPoll,
    ) {
        // Device files are always ready, as the seed's prf says and as
        // Linux reports every regular file (DEFAULT_POLLMASK).
        if let Err((e, _)) = self.with_chan(req, fh, |_, _, _| Ok(())) {
            return reply.error(e);
        }
        let ready = PollEvents::POLLIN
            | PollEvents::POLLRDNORM
            | PollEvents::POLLOUT
            | PollEvents::POLLWRNORM;
        reply.poll(ready & events);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_numbers_round_trip_and_never_collide() {
        let qids = [
            Qid::ROOT,
            Qid::file(0),
            Qid::file(1),
            Qid::dir(1),
            Qid::file(NUMBER_MASK),
            Qid::dir(NUMBER_MASK),
        ];
        let mut seen = std::collections::HashSet::new();
        assert!(seen.insert(INodeNo::ROOT.0));
        for dev in [0, 1, 7, MAX_DEVICES - 1] {
            for qid in qids {
                let ino = encode(dev, qid).unwrap();
                assert!(seen.insert(ino), "{dev} {qid:?} collides");
                assert_eq!(decode(ino), Some(Node::File { dev, qid }));
            }
        }
        assert_eq!(decode(1), Some(Node::Root));
        assert_eq!(encode(0, Qid::file(NUMBER_MASK + 1)), None);
        assert_eq!(encode(MAX_DEVICES, Qid::file(1)), None);
        // Stable: the same file always gets the same number.
        assert_eq!(encode(0, Qid::file(2)), Some((1 << 48) | 2));
    }

    #[test]
    fn quotes_are_short_and_escaped() {
        assert_eq!(quote(b"stopwatch\n"), "\"stopwatch\"");
        assert_eq!(quote(b"a\"b\tc"), "\"a\\\"b\\tc\"");
        let long = quote(&[b'x'; 200]);
        assert!(long.ends_with("...\"") && long.len() < 90, "{long}");
        // No byte sequence ends the quote early or starts a new line.
        let hostile = b"stop\" x\nprofdev: kprof: forged\r\x1b[2J\\\"";
        let q = quote(hostile);
        assert_eq!(
            q,
            "\"stop\\\" x\\nprofdev: kprof: forged\\r\\u{1b}[2J\\\\\\\"\""
        );
        assert!(!q.chars().any(char::is_control), "{q}");
        // The quote's content is the whole message between the outer
        // quotes: every inner quote is escaped.
        let inner = &q[1..q.len() - 1];
        assert!(inner
            .replace("\\\\", "")
            .replace("\\\"", "")
            .find('"')
            .is_none());
    }

    #[test]
    fn log_lines_stay_one_line() {
        assert_eq!(one_line("a\nb\x1b\"c"), "a\\nb\\u{1b}\"c");
        assert_eq!(one_line("plain \\n"), "plain \\n");
    }
}
