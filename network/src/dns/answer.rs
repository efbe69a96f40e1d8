//! Answering one question from [`Records`]: the name is split into its labels below the zone
//! and looked up in the index (pod names are decoded from the question instead), reverse
//! names are looked up in the PTR map, and anything else is left to the forwarder.
//!
//! The result is the sections of an authoritative reply, with the question's name as asked as
//! the owner of the answers: NOERROR with answers, NODATA (NOERROR, no answers, the zone's SOA
//! in authority) for a name that exists without records of the type, or NXDOMAIN with the SOA.
//! Address lists are rotated by a random offset so that clients taking the first address
//! spread over all of them.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::rdata::{A, AAAA, CNAME, NS, PTR, SOA, SRV, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType};

use super::records::{plain_label, Node, Records};

/// What the index says about a question.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    /// The name is ours: this is the whole answer.
    Answer(Answer),
    /// Not ours: ask the upstreams.
    Forward,
}

/// The sections of an authoritative reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub rcode: ResponseCode,
    pub answers: Vec<Record>,
    pub authority: Vec<Record>,
    pub additionals: Vec<Record>,
}

impl Answer {
    fn new(rcode: ResponseCode) -> Self {
        Self {
            rcode,
            answers: Vec::new(),
            authority: Vec::new(),
            additionals: Vec::new(),
        }
    }
}

/// The SOA timers (refresh, retry, expire), in seconds.
const SOA_TIMERS: (i32, i32, i32) = (7200, 1800, 86400);

impl Records {
    /// Answers `qtype` for `name` (any case) with records of this `ttl`, or says the name
    /// is not ours.
    pub fn lookup(&self, name: &Name, qtype: RecordType, ttl: u32) -> Lookup {
        if let Some(relative) = self.relative(name) {
            if !self.ready {
                return Lookup::Answer(Answer::new(ResponseCode::ServFail));
            }
            return Lookup::Answer(self.in_zone(name, &relative, qtype, ttl));
        }
        match reverse_address(name) {
            Some((ip, zone)) => match self.ptr.get(&ip) {
                Some(targets) => Lookup::Answer(self.reverse(name, zone, targets, qtype, ttl)),
                None => Lookup::Forward,
            },
            None => Lookup::Forward,
        }
    }

    /// The lowercase labels of `name` below the zone, or `None` if it is outside.
    fn relative(&self, name: &Name) -> Option<Vec<Vec<u8>>> {
        let labels: Vec<&[u8]> = name.iter().collect();
        let split = labels.len().checked_sub(self.zone_labels.len())?;
        let inside = labels[split..]
            .iter()
            .zip(&self.zone_labels)
            .all(|(label, zone)| label.eq_ignore_ascii_case(zone));
        inside.then(|| {
            labels[..split]
                .iter()
                .map(|l| l.to_ascii_lowercase())
                .collect()
        })
    }

    fn in_zone(&self, name: &Name, relative: &[Vec<u8>], qtype: RecordType, ttl: u32) -> Answer {
        if relative.last().is_some_and(|label| label == b"pod") {
            return self.pod(name, relative, qtype, ttl);
        }
        let node = key_of(relative).and_then(|key| Some((self.nodes.get(&key)?, key)));
        match node {
            Some((node, key)) => self.node(name, key.is_empty(), node, qtype, ttl),
            None => self.negative(ResponseCode::NXDomain, ttl),
        }
    }

    fn node(&self, name: &Name, apex: bool, node: &Node, qtype: RecordType, ttl: u32) -> Answer {
        let mut answer = Answer::new(ResponseCode::NoError);
        let record = |rdata| Record::from_rdata(name.clone(), ttl, rdata);
        if let Some(target) = &node.cname {
            answer
                .answers
                .push(record(RData::CNAME(CNAME(target.clone()))));
            return answer;
        }
        let any = qtype == RecordType::ANY;
        if qtype == RecordType::A || any {
            let a = rotated(&node.a).map(|ip| record(RData::A(A(*ip))));
            answer.answers.extend(a);
        }
        if qtype == RecordType::AAAA || any {
            let aaaa = rotated(&node.aaaa).map(|ip| record(RData::AAAA(AAAA(*ip))));
            answer.answers.extend(aaaa);
        }
        if qtype == RecordType::SRV || any {
            self.srv(node, &mut answer, &record, ttl);
        }
        if (qtype == RecordType::TXT || any) && !node.txt.is_empty() {
            answer
                .answers
                .push(record(RData::TXT(TXT::new(node.txt.clone()))));
        }
        if apex && (qtype == RecordType::SOA || any) {
            answer.answers.push(self.soa(name.clone(), ttl));
        }
        if apex && (qtype == RecordType::NS || any) {
            answer
                .answers
                .push(record(RData::NS(NS(self.mname.clone()))));
        }
        if answer.answers.is_empty() {
            answer.authority.push(self.soa(self.zone.clone(), ttl));
        }
        answer
    }

    /// The SRV records of a node, their targets' addresses in the additional section.
    fn srv(&self, node: &Node, answer: &mut Answer, record: &dyn Fn(RData) -> Record, ttl: u32) {
        let weight = u16::try_from(100 / node.srv.len().max(1))
            .unwrap_or(1)
            .max(1);
        let mut targets: Vec<&str> = Vec::new();
        for srv in rotated(&node.srv) {
            let rdata = SRV::new(0, weight, srv.port, srv.target.clone());
            answer.answers.push(record(RData::SRV(rdata)));
            if targets.contains(&srv.target_key.as_str()) {
                continue;
            }
            targets.push(&srv.target_key);
            let Some(target) = self.nodes.get(&srv.target_key) else {
                continue;
            };
            let additional = |rdata| Record::from_rdata(srv.target.clone(), ttl, rdata);
            let a = target.a.iter().map(|ip| additional(RData::A(A(*ip))));
            answer.additionals.extend(a);
            let aaaa = target
                .aaaa
                .iter()
                .map(|ip| additional(RData::AAAA(AAAA(*ip))));
            answer.additionals.extend(aaaa);
        }
    }

    /// `<dashed-ip>.<namespace>.pod.<zone>`, any namespace, any address.
    fn pod(&self, name: &Name, relative: &[Vec<u8>], qtype: RecordType, ttl: u32) -> Answer {
        let nodata = || self.negative(ResponseCode::NoError, ttl);
        let nxdomain = || self.negative(ResponseCode::NXDomain, ttl);
        let namespace_ok = |label: &[u8]| {
            std::str::from_utf8(label)
                .ok()
                .and_then(plain_label)
                .is_some()
        };
        match relative {
            [_pod] => nodata(),
            [namespace, _pod] if namespace_ok(namespace) => nodata(),
            [address, namespace, _pod] if namespace_ok(namespace) => {
                let Some(ip) = undashed(address) else {
                    return nxdomain();
                };
                let any = qtype == RecordType::ANY;
                let rdata = match ip {
                    IpAddr::V4(v4) if qtype == RecordType::A || any => RData::A(A(v4)),
                    IpAddr::V6(v6) if qtype == RecordType::AAAA || any => RData::AAAA(AAAA(v6)),
                    _ => return nodata(),
                };
                let mut answer = Answer::new(ResponseCode::NoError);
                answer
                    .answers
                    .push(Record::from_rdata(name.clone(), ttl, rdata));
                answer
            }
            _ => nxdomain(),
        }
    }

    /// A reverse name of one of our addresses.
    fn reverse(
        &self,
        name: &Name,
        zone: &str,
        targets: &[Name],
        qtype: RecordType,
        ttl: u32,
    ) -> Answer {
        let mut answer = Answer::new(ResponseCode::NoError);
        if qtype == RecordType::PTR || qtype == RecordType::ANY {
            let ptr = targets.iter().map(|target| {
                Record::from_rdata(name.clone(), ttl, RData::PTR(PTR(target.clone())))
            });
            answer.answers.extend(ptr);
        } else {
            let zone = Name::from_ascii(zone).unwrap_or_else(|_| Name::root());
            answer.authority.push(self.soa(zone, ttl));
        }
        answer
    }

    /// NXDOMAIN or NODATA: no answers, the zone's SOA in authority.
    fn negative(&self, rcode: ResponseCode, ttl: u32) -> Answer {
        let mut answer = Answer::new(rcode);
        answer.authority.push(self.soa(self.zone.clone(), ttl));
        answer
    }

    fn soa(&self, owner: Name, ttl: u32) -> Record {
        let (refresh, retry, expire) = SOA_TIMERS;
        let soa = SOA::new(
            self.mname.clone(),
            self.rname.clone(),
            self.serial,
            refresh,
            retry,
            expire,
            ttl,
        );
        Record::from_rdata(owner, ttl, RData::SOA(soa))
    }
}

/// The index key of these labels, if they are all plain labels.
fn key_of(relative: &[Vec<u8>]) -> Option<String> {
    let mut key = String::new();
    for label in relative {
        let label = plain_label(std::str::from_utf8(label).ok()?)?;
        if !key.is_empty() {
            key.push('.');
        }
        key.push_str(&label);
    }
    Some(key)
}

/// The items from a random offset on, wrapping around.
fn rotated<T>(items: &[T]) -> impl Iterator<Item = &T> {
    let start = if items.len() > 1 {
        rand::random_range(0..items.len())
    } else {
        0
    };
    items[start..].iter().chain(&items[..start])
}

/// The address a pod label stands for: `10-1-2-3`, or IPv6 with `-` for `:`.
fn undashed(label: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(label).ok()?;
    if let Ok(v4) = text.replace('-', ".").parse::<Ipv4Addr>() {
        return Some(IpAddr::V4(v4));
    }
    text.replace('-', ":")
        .parse::<Ipv6Addr>()
        .ok()
        .map(IpAddr::V6)
}

/// The address of a full reverse name (`4.3.2.1.in-addr.arpa.`, 32 nibbles `.ip6.arpa.`),
/// with the reverse zone it lies in.
pub(super) fn reverse_address(name: &Name) -> Option<(IpAddr, &'static str)> {
    let labels: Vec<&[u8]> = name.iter().collect();
    match labels.as_slice() {
        [d, c, b, a, in_addr, arpa]
            if in_addr.eq_ignore_ascii_case(b"in-addr") && arpa.eq_ignore_ascii_case(b"arpa") =>
        {
            let octet = |label: &[u8]| -> Option<u8> {
                let text = std::str::from_utf8(label).ok()?;
                let canonical = !text.is_empty()
                    && text.bytes().all(|b| b.is_ascii_digit())
                    && (text.len() == 1 || !text.starts_with('0'));
                canonical.then(|| text.parse().ok()).flatten()
            };
            let ip = Ipv4Addr::new(octet(a)?, octet(b)?, octet(c)?, octet(d)?);
            Some((IpAddr::V4(ip), "in-addr.arpa."))
        }
        [nibbles @ .., ip6, arpa]
            if nibbles.len() == 32
                && ip6.eq_ignore_ascii_case(b"ip6")
                && arpa.eq_ignore_ascii_case(b"arpa") =>
        {
            let mut bytes = [0u8; 16];
            for (i, label) in nibbles.iter().rev().enumerate() {
                let [digit] = label else {
                    return None;
                };
                let value = u8::try_from(char::from(*digit).to_digit(16)?).ok()?;
                bytes[i / 2] |= if i % 2 == 0 { value << 4 } else { value };
            }
            Some((IpAddr::V6(Ipv6Addr::from(bytes)), "ip6.arpa."))
        }
        _ => None,
    }
}
