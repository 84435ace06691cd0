//! What a process's `/proc/PID/cgroup` reveals: its cgroup path, and from
//! it the container id, the systemd unit and the Kubernetes pod uid where
//! the path names them. A pure parser of the file's lines
//! (`HIERARCHY-ID:CONTROLLERS:PATH`), cgroup v2 (`0::/PATH`), v1 and the
//! hybrid of both.
//!
//! The path taken is the first that says more than `/` of: the v2 one
//! (`0::`), the v1 `name=systemd` hierarchy's, the other lines' in their
//! order; else `/`. Names are
//! the conventions of the runtimes that make them:
//!
//! * container: a path component of 64 hex digits, bare (`/docker/ID`,
//!   cgroupfs drivers) or as `PREFIX-ID.scope` (systemd drivers: `docker-`,
//!   `cri-containerd-`, `crio-`, `libpod-`);
//! * pod: `podUID` (cgroupfs) or `kubepods-…-podUID.slice` (systemd, the
//!   uid's dashes written as underscores);
//! * unit: the innermost component ending in `.service` or `.scope`.

/// What a cgroup path names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cgroup {
    /// The cgroup path (`/system.slice/nginx.service`).
    pub path: String,
    /// The container id (64 hex digits).
    pub container_id: Option<String>,
    /// The systemd unit (`nginx.service`, `docker-ID.scope`).
    pub systemd_unit: Option<String>,
    /// The Kubernetes pod uid (with dashes).
    pub pod_uid: Option<String>,
}

/// The cgroup of the text of a `/proc/PID/cgroup` file; `None` when no
/// line parses.
pub fn parse(text: &str) -> Option<Cgroup> {
    let mut v2 = None;
    let mut systemd = None;
    let mut others = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if !path.starts_with('/') {
            continue;
        }
        if id == "0" && controllers.is_empty() {
            v2 = Some(path);
        } else if controllers == "name=systemd" {
            systemd = Some(path);
        } else {
            others.push(path);
        }
    }
    let candidates: Vec<&str> = v2.into_iter().chain(systemd).chain(others).collect();
    let path = candidates
        .iter()
        .find(|p| **p != "/")
        .or(candidates.first())?;
    Some(of_path(path))
}

/// What a cgroup path names.
pub fn of_path(path: &str) -> Cgroup {
    let mut c = Cgroup {
        path: path.to_string(),
        ..Cgroup::default()
    };
    for part in path.split('/').filter(|p| !p.is_empty()) {
        if let Some(id) = container_id(part) {
            c.container_id = Some(id.to_string());
        }
        if let Some(uid) = pod_uid(part) {
            c.pod_uid = Some(uid);
        }
        if part.ends_with(".service") || part.ends_with(".scope") {
            c.systemd_unit = Some(part.to_string());
        }
    }
    c
}

fn is_container_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The container id a path component is, or names as `PREFIX-ID.scope`.
fn container_id(part: &str) -> Option<&str> {
    if is_container_id(part) {
        return Some(part);
    }
    let stem = part.strip_suffix(".scope")?;
    let id = &stem[stem.rfind('-')? + 1..];
    is_container_id(id).then_some(id)
}

/// The pod uid a path component names: `podUID` or `…-podUID.slice`.
fn pod_uid(part: &str) -> Option<String> {
    let stem = part.strip_suffix(".slice").unwrap_or(part);
    let after = if let Some(i) = stem.rfind("-pod") {
        &stem[i + 4..]
    } else {
        stem.strip_prefix("pod")?
    };
    let uid = after.replace('_', "-");
    let looks_like_uid = uid.len() == 36
        && uid.bytes().enumerate().all(|(i, b)| {
            matches!(i, 8 | 13 | 18 | 23) == (b == b'-') && (b == b'-' || b.is_ascii_hexdigit())
        });
    looks_like_uid.then_some(uid)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f2a8c9d0b1e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f90";
    const POD: &str = "8d7e6f5a-4b3c-2d1e-0f9a-8b7c6d5e4f3a";

    #[test]
    fn a_systemd_service_on_cgroup_v2() {
        let c = parse("0::/system.slice/nginx.service\n").unwrap();
        assert_eq!(c.path, "/system.slice/nginx.service");
        assert_eq!(c.systemd_unit.as_deref(), Some("nginx.service"));
        assert_eq!((c.container_id, c.pod_uid), (None, None));
    }

    /// A hybrid hierarchy: v1 controllers, the named systemd hierarchy and
    /// an empty v2 line; the systemd hierarchy's path is taken.
    #[test]
    fn a_docker_container_on_a_hybrid_hierarchy() {
        let text = format!(
            "12:cpuset:/docker/{ID}\n11:memory:/docker/{ID}\n\
             1:name=systemd:/system.slice/docker-{ID}.scope\n0::/\n"
        );
        let c = parse(&text).unwrap();
        assert_eq!(c.path, format!("/system.slice/docker-{ID}.scope"));
        assert_eq!(c.container_id.as_deref(), Some(ID));
        assert_eq!(c.systemd_unit, Some(format!("docker-{ID}.scope")));
        // cgroupfs driver, v1 only: the bare id.
        let c = parse(&format!("4:cpu,cpuacct:/docker/{ID}\n")).unwrap();
        assert_eq!(c.container_id.as_deref(), Some(ID));
        assert_eq!(c.systemd_unit, None);
    }

    #[test]
    fn a_kubernetes_pod_with_the_systemd_and_cgroupfs_drivers() {
        let under = POD.replace('-', "_");
        let text = format!(
            "0::/kubepods.slice/kubepods-burstable.slice/\
             kubepods-burstable-pod{under}.slice/cri-containerd-{ID}.scope\n"
        );
        let c = parse(&text).unwrap();
        assert_eq!(c.pod_uid.as_deref(), Some(POD));
        assert_eq!(c.container_id.as_deref(), Some(ID));
        assert_eq!(c.systemd_unit, Some(format!("cri-containerd-{ID}.scope")));
        let c = parse(&format!("3:memory:/kubepods/besteffort/pod{POD}/{ID}\n")).unwrap();
        assert_eq!(c.pod_uid.as_deref(), Some(POD));
        assert_eq!(c.container_id.as_deref(), Some(ID));
    }

    /// This machine's own hybrid hierarchy: only the memory controller's
    /// path says anything.
    #[test]
    fn the_one_specific_v1_line_of_a_hybrid_hierarchy() {
        let text =
            "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/45f76ab5bf9b27a809e2916ba23d60e5\n\
                    3:cpuset:/\n0::/\n";
        let c = parse(text).unwrap();
        assert_eq!(c.path, "/process_api/45f76ab5bf9b27a809e2916ba23d60e5");
        assert_eq!(c.container_id, None);
        assert_eq!(parse("0::/\n1:name=systemd:/\n").unwrap().path, "/");
    }

    #[test]
    fn a_user_session_and_lines_that_do_not_parse() {
        let c = parse("0::/user.slice/user-1000.slice/session-3.scope\n").unwrap();
        assert_eq!(c.systemd_unit.as_deref(), Some("session-3.scope"));
        assert_eq!(c.container_id, None);
        assert_eq!(parse(""), None);
        assert_eq!(parse("garbage\n1:cpu\n"), None);
        // Not a pod: a slice that merely contains "pod".
        assert_eq!(of_path("/podman.slice/x.service").pod_uid, None);
    }
}
