//! One received message in, one action out — the part of the server that knows DNS but not
//! sockets. A message is dropped when even its header does not parse (or it is a response);
//! FORMERR when the rest does not parse or it holds other than one question; NOTIMP for an
//! opcode other than QUERY; BADVERS for EDNS above version 0; REFUSED for a class other than
//! IN, zone transfers, and names outside the zone when there is nowhere to forward them.
//!
//! Replies echo the id, the question and RD, set RA (and AA for answers of the zone), and
//! carry an OPT record when the query did. A UDP reply larger than the client takes (its EDNS
//! payload size within 512..=4096, else 512) first loses its additional section, then is cut
//! to the header and question with TC set, so that the client retries over TCP.

use hickory_proto::op::{Edns, Header, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{DNSClass, RecordType};
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder};

use super::{Answer, Lookup, Records};

/// The UDP payload size answers may take without EDNS.
pub(super) const CLASSIC_UDP: usize = 512;
/// The largest UDP payload size answers take, whatever the client offers; also what this
/// server advertises.
pub(super) const MAX_UDP: u16 = 4096;
/// The largest DNS message (a TCP message's length is 16 bits).
pub(super) const MAX_MESSAGE: usize = u16::MAX as usize;

/// How the message arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Transport {
    Udp,
    Tcp,
}

/// What to do with one received message.
#[derive(Debug)]
pub(super) enum Action {
    /// Send this reply.
    Reply(Vec<u8>),
    /// Ask the upstreams; [`Request::relay`] or [`Request::reply`] makes the reply.
    Forward(Request),
    /// Send nothing.
    Drop,
}

/// What answering a query takes once it has been parsed.
#[derive(Debug, Clone)]
pub(super) struct Request {
    /// The query as received, for forwarding.
    pub(super) bytes: Vec<u8>,
    pub(super) id: u16,
    op_code: OpCode,
    recursion_desired: bool,
    checking_disabled: bool,
    pub(super) queries: Vec<Query>,
    edns: bool,
    /// The largest reply the client takes.
    limit: usize,
    pub(super) transport: Transport,
}

/// Decides what to do with `bytes` received over `transport`, answering names of the zone
/// from `records` with this `ttl`; `forwarding` says whether there are upstreams.
pub(super) fn process(
    bytes: &[u8],
    records: &Records,
    ttl: u32,
    forwarding: bool,
    transport: Transport,
) -> Action {
    let Ok(header) = Header::read(&mut BinDecoder::new(bytes)) else {
        return Action::Drop;
    };
    if header.message_type() != MessageType::Query {
        return Action::Drop;
    }
    let message = match Message::from_vec(bytes) {
        Ok(message) => message,
        Err(_) => {
            let request = Request::from_header(&header, transport);
            return request.action(ResponseCode::FormErr, None);
        }
    };
    let request = Request::new(bytes, &message, transport);
    if message.op_code() != OpCode::Query {
        return request.action(ResponseCode::NotImp, None);
    }
    let [query] = message.queries() else {
        return request.action(ResponseCode::FormErr, None);
    };
    if message
        .extensions()
        .as_ref()
        .is_some_and(|edns| edns.version() > 0)
    {
        return request.action(ResponseCode::BADVERS, None);
    }
    if query.query_class() != DNSClass::IN
        || matches!(query.query_type(), RecordType::AXFR | RecordType::IXFR)
    {
        return request.action(ResponseCode::Refused, None);
    }
    match records.lookup(query.name(), query.query_type(), ttl) {
        Lookup::Answer(answer) => request.action(answer.rcode, Some(answer)),
        Lookup::Forward if forwarding => Action::Forward(request),
        Lookup::Forward => request.action(ResponseCode::Refused, None),
    }
}

impl Request {
    fn new(bytes: &[u8], message: &Message, transport: Transport) -> Self {
        let edns = message.extensions().as_ref();
        let limit = match (transport, edns) {
            (Transport::Tcp, _) => MAX_MESSAGE,
            (Transport::Udp, Some(edns)) => {
                usize::from(edns.max_payload().clamp(CLASSIC_UDP as u16, MAX_UDP))
            }
            (Transport::Udp, None) => CLASSIC_UDP,
        };
        Self {
            bytes: bytes.to_vec(),
            id: message.id(),
            op_code: message.op_code(),
            recursion_desired: message.recursion_desired(),
            checking_disabled: message.checking_disabled(),
            queries: message.queries().to_vec(),
            edns: edns.is_some(),
            limit,
            transport,
        }
    }

    /// For a message of which only the header parsed.
    fn from_header(header: &Header, transport: Transport) -> Self {
        Self {
            bytes: Vec::new(),
            id: header.id(),
            op_code: header.op_code(),
            recursion_desired: header.recursion_desired(),
            checking_disabled: header.checking_disabled(),
            queries: Vec::new(),
            edns: false,
            limit: CLASSIC_UDP,
            transport,
        }
    }

    /// The one question (a forwarded request has exactly one).
    pub(super) fn query(&self) -> Option<&Query> {
        self.queries.first()
    }

    fn action(&self, rcode: ResponseCode, answer: Option<Answer>) -> Action {
        match self.reply(rcode, answer) {
            Some(bytes) => Action::Reply(bytes),
            None => Action::Drop,
        }
    }

    /// The encoded reply with this code and, for the zone's names, these sections.
    pub(super) fn reply(&self, rcode: ResponseCode, answer: Option<Answer>) -> Option<Vec<u8>> {
        let mut message = Message::new();
        message
            .set_id(self.id)
            .set_message_type(MessageType::Response)
            .set_op_code(self.op_code)
            .set_recursion_desired(self.recursion_desired)
            .set_recursion_available(true)
            .set_checking_disabled(self.checking_disabled)
            .set_response_code(rcode);
        message.add_queries(self.queries.iter().cloned());
        if self.edns || rcode.high() > 0 {
            let mut edns = Edns::new();
            edns.set_max_payload(MAX_UDP).set_version(0);
            message.set_edns(edns);
        }
        if let Some(answer) = answer {
            message.set_authoritative(true);
            message.insert_answers(answer.answers);
            message.insert_name_servers(answer.authority);
            message.insert_additionals(answer.additionals);
        }
        fit(message, self.limit)
    }

    /// An upstream's reply to this request, with the client's id, cut down to what the
    /// client takes.
    pub(super) fn relay(&self, mut reply: Vec<u8>) -> Option<Vec<u8>> {
        let Some(id) = reply.get_mut(..2) else {
            return self.reply(ResponseCode::ServFail, None);
        };
        id.copy_from_slice(&self.id.to_be_bytes());
        if reply.len() <= self.limit {
            return Some(reply);
        }
        match Message::from_vec(&reply) {
            Ok(message) => encoded(&message.truncate()).filter(|bytes| bytes.len() <= self.limit),
            Err(_) => self.reply(ResponseCode::ServFail, None),
        }
    }
}

/// The message encoded within `limit` bytes: whole, else without its additional records,
/// else as header and question with TC set.
fn fit(mut message: Message, limit: usize) -> Option<Vec<u8>> {
    if let Some(bytes) = encoded(&message).filter(|bytes| bytes.len() <= limit) {
        return Some(bytes);
    }
    if !message.additionals().is_empty() {
        message.take_additionals();
        if let Some(bytes) = encoded(&message).filter(|bytes| bytes.len() <= limit) {
            return Some(bytes);
        }
    }
    encoded(&message.truncate()).filter(|bytes| bytes.len() <= limit)
}

fn encoded(message: &Message) -> Option<Vec<u8>> {
    match message.to_vec() {
        Ok(bytes) => Some(bytes),
        Err(error) => {
            tracing::debug!(%error, "encoding a DNS reply");
            None
        }
    }
}
