//! `zk://host:port[,host:port...][/base/path]`, and lock names as ZooKeeper path nodes.

use crate::error::InputError;

/// The base path when the URL names none.
pub(crate) const DEFAULT_BASE: &str = "/fencelock";

/// Where a `zk://` URL points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ZkTarget {
    /// `host:port,host:port` as the ZooKeeper client takes it.
    pub(crate) hosts: String,
    /// The base path under which every lock is a node (`<base>/<name>`).
    pub(crate) base: String,
}

/// Parses a `zk://` URL.
pub(crate) fn parse_target(url: &str) -> Result<ZkTarget, InputError> {
    let invalid = |reason: &str| InputError::InvalidUrl {
        url: url.to_owned(),
        reason: reason.to_owned(),
    };
    let rest = url
        .strip_prefix("zk://")
        .ok_or_else(|| invalid("expected zk://host:port[,host:port...][/base/path]"))?;
    if rest.contains('@') {
        return Err(invalid(
            "fencelock does not take ZooKeeper credentials in the URL",
        ));
    }
    let (list, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if list.is_empty() {
        return Err(invalid("the URL names no host"));
    }
    for host in list.split(',') {
        let port = host.rsplit_once(':').map(|(h, p)| (h, p.parse::<u16>()));
        match port {
            Some((h, Ok(p))) if !h.is_empty() && p != 0 => {}
            _ => {
                return Err(invalid(
                    "each host must be host:port with a port in 1..=65535",
                ))
            }
        }
    }
    let base = match path.trim_end_matches('/') {
        "" => DEFAULT_BASE.to_owned(),
        base => {
            for node in base[1..].split('/') {
                node_problem(node).map_err(invalid)?;
            }
            if base == "/zookeeper" || base.starts_with("/zookeeper/") {
                return Err(invalid("/zookeeper is ZooKeeper's own subtree"));
            }
            base.to_owned()
        }
    };
    Ok(ZkTarget {
        hosts: list.to_owned(),
        base,
    })
}

/// Why `node` cannot be one node of a ZooKeeper path, if it cannot.
fn node_problem(node: &str) -> Result<(), &'static str> {
    if node.is_empty() {
        return Err("a path node is empty (\"//\")");
    }
    if node == "." || node == ".." {
        return Err("\".\" and \"..\" are not path nodes in ZooKeeper");
    }
    if node.contains('/') {
        return Err("it contains '/'");
    }
    // The characters ZooKeeper's PathUtils refuses.
    let refused = |c: char| matches!(u32::from(c), 0x0000..=0x001f | 0x007f..=0x009f | 0xd800..=0xf8ff | 0xfff0..=0xffff);
    if node.chars().any(refused) {
        return Err("it contains a character ZooKeeper refuses in paths (control or private-use)");
    }
    Ok(())
}

/// Checks a lock name as one node below the base path, before any I/O.
pub(crate) fn check_name(name: &str) -> Result<(), InputError> {
    node_problem(name).map_err(|reason| InputError::InvalidName {
        name: name.to_owned(),
        service: "ZooKeeper",
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_parsed() {
        let t = parse_target("zk://127.0.0.1:2181").unwrap();
        assert_eq!(t.hosts, "127.0.0.1:2181");
        assert_eq!(t.base, "/fencelock");
        let t = parse_target("zk://a:1,b:2,c:3/locks/prod/").unwrap();
        assert_eq!(t.hosts, "a:1,b:2,c:3");
        assert_eq!(t.base, "/locks/prod");
        assert_eq!(parse_target("zk://a:1/").unwrap().base, "/fencelock");
        for bad in [
            "zk://",
            "zk://a",
            "zk://a:0",
            "zk://a:x",
            "zk://:1",
            "zk://a:1,/x",
            "zk://a:1//x",
            "zk://a:1/x/../y",
            "zk://a:1/zookeeper/x",
            "zk://u:p@a:1",
            "redis://a:1",
        ] {
            assert!(
                matches!(parse_target(bad), Err(InputError::InvalidUrl { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn names_are_single_nodes() {
        for good in ["orders:42", "a.b", "...", "é", "zookeeper"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in [
            "a/b",
            "/",
            ".",
            "..",
            "a\0b",
            "a\u{7f}",
            "a\u{e000}",
            "a\u{fff0}",
        ] {
            assert!(
                matches!(check_name(bad), Err(InputError::InvalidName { .. })),
                "{bad:?}"
            );
        }
    }
}
