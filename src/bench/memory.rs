//! How much memory a subject's server holds, for `rudder bench storage`'s scaling runs: the
//! processes listening on the server's TCP port (etcd, the PostgreSQL postmaster, mariadbd, the
//! Spanner emulator) and everything they started (PostgreSQL's backends), summed as PSS — each
//! page shared between them counted once, not once per process as RSS would. Read from
//! `/proc` (Linux, and only processes this user may inspect: run as root or as the servers'
//! owner). Embedded stores (SQLite) live in the bench's own process, whose RSS is reported
//! beside.

use std::collections::{HashMap, HashSet};
use std::fs;

/// Bytes of PSS held by the server listening on `port` and its descendants, or `None` when no
/// process visible here listens on it.
pub fn server_pss(port: u16) -> Option<u64> {
    let inodes = listening_inodes(port);
    if inodes.is_empty() {
        return None;
    }
    let listeners = processes_with_sockets(&inodes);
    if listeners.is_empty() {
        return None;
    }
    let processes = with_descendants(&listeners);
    let total = processes.iter().filter_map(|pid| pss_of(*pid)).sum::<u64>();
    (total > 0).then_some(total)
}

/// Resident memory of this process, in bytes.
pub fn own_rss() -> Option<u64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    kilobytes_field(&status, "VmRSS:").map(|kib| kib * 1024)
}

/// The socket inodes listening on `port` (IPv4 and IPv6).
fn listening_inodes(port: u16) -> HashSet<u64> {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|path| fs::read_to_string(path).ok())
        .flat_map(|table| {
            table
                .lines()
                .skip(1)
                .filter_map(|line| listening_inode(line, port))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The inode of a `/proc/net/tcp` line's socket, if it listens on `port`.
fn listening_inode(line: &str, port: u16) -> Option<u64> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let local = fields.get(1)?;
    let state = fields.get(3)?;
    let (_, hex_port) = local.rsplit_once(':')?;
    let listening = *state == "0A" && u16::from_str_radix(hex_port, 16).ok()? == port;
    listening.then(|| fields.get(9)?.parse().ok()).flatten()
}

/// Every process holding one of `inodes` open.
fn processes_with_sockets(inodes: &HashSet<u64>) -> HashSet<u32> {
    let mut found = HashSet::new();
    for pid in all_pids() {
        let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            fs::read_link(fd.path()).ok().is_some_and(|target| {
                socket_inode(&target.to_string_lossy()).is_some_and(|i| inodes.contains(&i))
            })
        });
        if holds {
            found.insert(pid);
        }
    }
    found
}

/// `socket:[12345]` → 12345.
fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// `roots` and every process descended from one of them.
fn with_descendants(roots: &HashSet<u32>) -> HashSet<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for pid in all_pids() {
        if let Some(parent) = fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| parent_of(&stat))
        {
            children.entry(parent).or_default().push(pid);
        }
    }
    let mut all: HashSet<u32> = roots.clone();
    let mut queue: Vec<u32> = roots.iter().copied().collect();
    while let Some(pid) = queue.pop() {
        for child in children.get(&pid).into_iter().flatten() {
            if all.insert(*child) {
                queue.push(*child);
            }
        }
    }
    all
}

/// The parent pid from `/proc/PID/stat` (the field after the parenthesised command name,
/// which may itself hold spaces and parentheses, and the state).
fn parent_of(stat: &str) -> Option<u32> {
    let (_, after_name) = stat.rsplit_once(')')?;
    after_name.split_whitespace().nth(1)?.parse().ok()
}

fn all_pids() -> Vec<u32> {
    fs::read_dir("/proc")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// A process's proportional set size, in bytes.
fn pss_of(pid: u32) -> Option<u64> {
    let rollup = fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    kilobytes_field(&rollup, "Pss:").map(|kib| kib * 1024)
}

/// The value of a `Name:   123 kB` line.
fn kilobytes_field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_kernels_tables() {
        let listening = "   0: 0100007F:0929 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 31337 1 0000000000000000 100 0 0 10 0";
        assert_eq!(listening_inode(listening, 2345), Some(31337));
        assert_eq!(listening_inode(listening, 2346), None);
        let established = listening.replace(" 0A ", " 01 ");
        assert_eq!(listening_inode(&established, 2345), None);
        assert_eq!(socket_inode("socket:[31337]"), Some(31337));
        assert_eq!(socket_inode("/dev/null"), None);
        assert_eq!(
            parent_of("4242 (post gres: (idle)) S 17 4242 4242 0 -1"),
            Some(17)
        );
        let rollup = "00400000-7fff [rollup]\nRss:   2048 kB\nPss:   1024 kB\nPss_Anon:  512 kB\n";
        assert_eq!(kilobytes_field(rollup, "Pss:"), Some(1024));
        assert_eq!(kilobytes_field(rollup, "Swap:"), None);
    }

    #[test]
    fn finds_a_listening_process_of_its_own() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let pss = server_pss(port).expect("this process listens on the port");
        let rss = own_rss().unwrap();
        assert!(pss > 1024 * 1024, "{pss}");
        // This process and its children (none here): about its own RSS, never far above it.
        assert!(pss <= rss * 2, "{pss} vs {rss}");
        drop(listener);
        assert_eq!(server_pss(port), None);
    }
}
