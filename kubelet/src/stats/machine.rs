//! What the node itself uses, read from the kernel: memory from `/proc/meminfo`, CPU time
//! from `/proc/stat`, processes from `/proc/loadavg` and `pid_max`, and filesystems with
//! `statvfs`. Upstream's kubelet gets the same numbers through cAdvisor; the definitions
//! follow its: the working set is what is in use less the inactive file cache, and
//! `memory.available` is capacity less the working set.

use std::path::Path;

/// The node's memory, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Memory {
    pub capacity: u64,
    pub usage: u64,
    pub working_set: u64,
    pub available: u64,
}

/// One filesystem's size and use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Filesystem {
    pub capacity: u64,
    pub available: u64,
    pub used: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

/// How many processes may exist and how many do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Processes {
    pub max: u64,
    pub current: u64,
}

/// `/proc/meminfo` in bytes: usage is total less free, the working set is usage less the
/// inactive file cache.
pub fn parse_meminfo(text: &str) -> Option<Memory> {
    let field = |name: &str| -> Option<u64> {
        text.lines().find_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix(':')?;
            let kib: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
            Some(kib * 1024)
        })
    };
    let capacity = field("MemTotal")?;
    let free = field("MemFree")?;
    let inactive_file = field("Inactive(file)").unwrap_or(0);
    let usage = capacity.saturating_sub(free);
    let working_set = usage.saturating_sub(inactive_file);
    Some(Memory {
        capacity,
        usage,
        working_set,
        available: capacity.saturating_sub(working_set),
    })
}

/// The node's busy CPU time in nanoseconds from the `cpu` line of `/proc/stat` (user, nice,
/// system, irq, softirq and steal; not idle or iowait), counted in ticks of `ticks_per_second`.
pub fn parse_cpu_nanoseconds(text: &str, ticks_per_second: u64) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    let at = |i: usize| ticks.get(i).copied().unwrap_or(0);
    let busy = at(0) + at(1) + at(2) + at(5) + at(6) + at(7);
    Some(busy.saturating_mul(1_000_000_000 / ticks_per_second.max(1)))
}

/// The number of threads that exist, the total of `/proc/loadavg`'s `running/total` field.
pub fn parse_loadavg_threads(text: &str) -> Option<u64> {
    let field = text.split_whitespace().nth(3)?;
    field.split_once('/')?.1.parse().ok()
}

pub fn memory() -> Option<Memory> {
    parse_meminfo(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

pub fn cpu_nanoseconds() -> Option<u64> {
    // USER_HZ is 100 on every Linux architecture Rudder builds for.
    parse_cpu_nanoseconds(&std::fs::read_to_string("/proc/stat").ok()?, 100)
}

pub fn processes() -> Option<Processes> {
    let max = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let current = parse_loadavg_threads(&std::fs::read_to_string("/proc/loadavg").ok()?)?;
    Some(Processes { max, current })
}

/// The filesystem holding `path` (as unprivileged users see it: `f_bavail`).
pub fn filesystem(path: &Path) -> Option<Filesystem> {
    let stat = nix::sys::statvfs::statvfs(path).ok()?;
    let block = stat.fragment_size();
    let capacity = stat.blocks().saturating_mul(block);
    let free = stat.blocks_free().saturating_mul(block);
    Some(Filesystem {
        capacity,
        available: stat.blocks_available().saturating_mul(block),
        used: capacity.saturating_sub(free),
        inodes: stat.files(),
        inodes_free: stat.files_free(),
    })
}

/// The disk a directory tree takes (allocated blocks) and its inode count, without following
/// symlinks or crossing into other filesystems (a memory-backed emptyDir counts as memory,
/// not disk).
pub fn directory_usage(path: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let Ok(top) = std::fs::symlink_metadata(path) else {
        return (0, 0);
    };
    let device = top.dev();
    let mut bytes = 0u64;
    let mut inodes = 0u64;
    let mut pending = vec![path.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&dir) else {
            continue;
        };
        if meta.dev() != device {
            continue;
        }
        bytes += meta.blocks() * 512;
        inodes += 1;
        if !meta.is_dir() {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            if meta.is_dir() {
                pending.push(entry.path());
            } else if meta.dev() == device {
                bytes += meta.blocks() * 512;
                inodes += 1;
            }
        }
    }
    (bytes, inodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_working_set_leaves_out_the_inactive_file_cache() {
        let meminfo = "MemTotal:        8000000 kB\nMemFree:         1000000 kB\n\
                       MemAvailable:    5000000 kB\nInactive(file):  2000000 kB\n";
        let memory = parse_meminfo(meminfo).unwrap();
        assert_eq!(memory.capacity, 8_000_000 * 1024);
        assert_eq!(memory.usage, 7_000_000 * 1024);
        assert_eq!(memory.working_set, 5_000_000 * 1024);
        assert_eq!(memory.available, 3_000_000 * 1024);
        assert_eq!(parse_meminfo("MemFree: 1 kB\n"), None);
    }

    #[test]
    fn busy_cpu_time_counts_neither_idle_nor_iowait() {
        let stat = "cpu  100 20 30 5000 40 5 6 7 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        // user + nice + system + irq + softirq + steal = 168 ticks of 10 ms.
        assert_eq!(parse_cpu_nanoseconds(stat, 100), Some(1_680_000_000));
        assert_eq!(parse_cpu_nanoseconds("intr 1\n", 100), None);
    }

    #[test]
    fn threads_come_from_loadavg() {
        assert_eq!(
            parse_loadavg_threads("0.52 0.58 0.59 3/1234 56789\n"),
            Some(1234)
        );
        assert_eq!(parse_loadavg_threads("0.52 0.58"), None);
    }

    #[test]
    fn a_directory_counts_its_files_blocks() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/data"), vec![1u8; 64 * 1024]).unwrap();
        let (bytes, inodes) = directory_usage(dir.path());
        assert!(bytes >= 64 * 1024, "{bytes}");
        assert_eq!(inodes, 3);
        assert_eq!(directory_usage(&dir.path().join("missing")), (0, 0));
        let fs = filesystem(dir.path()).unwrap();
        assert!(fs.capacity >= fs.available && fs.capacity > 0);
    }
}
