//! Lets the HTTP/2 server take requests whose `:authority` is a socket
//! path, as kubelet sends them.
//!
//! kubelet before 1.26 dials its plugins' unix sockets with grpc-go
//! targets that are plain paths, and grpc-go then sends the path as the
//! `:authority` pseudo-header (kubernetes #112597 set it to `localhost`).
//! A path is no valid authority (RFC 3986 §3.2), and h2, under hyper,
//! resets such a stream with PROTOCOL_ERROR (hyperium/h2 #487, open): every
//! call kubelet 1.20 makes to a device plugin served here would fail.
//!
//! [`AuthorityFix`] sits under hyper on each accepted connection and
//! rewrites, in the client's HEADERS, a literal `:authority` whose value is
//! no valid authority: its characters outside `[A-Za-z0-9._~-]` become `-`,
//! so the value keeps its length. The HPACK dynamic table entry the literal
//! adds (RFC 7541 §4.1: its size is the lengths plus 32) then has the size
//! the client's encoder counted, and the two tables stay in step: later
//! requests that name the entry by index get the rewritten value. The
//! value is written as a plain string and the frame's length set anew.
//! Everything else passes unchanged, byte for byte.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// RFC 9113 §3.4: what a client sends before its first frame.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADER: usize = 9;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// The largest frame a peer must accept (SETTINGS_MAX_FRAME_SIZE's default).
const MAX_FRAME: usize = 16_384;
/// `:authority`'s index in HPACK's static table (RFC 7541 Appendix A).
const AUTHORITY: u64 = 1;

/// A connection whose incoming bytes have their `:authority` made valid.
pub(crate) struct AuthorityFix<S> {
    inner: S,
    /// Read from `inner`, not yet a whole frame.
    input: Vec<u8>,
    /// Rewritten, not yet handed to the reader.
    output: Vec<u8>,
    delivered: usize,
    preface_seen: bool,
    /// A HEADERS frame's header, priority and fragments while its
    /// CONTINUATION frames come.
    pending: Option<Pending>,
}

struct Pending {
    stream: [u8; 4],
    flags: u8,
    priority: Vec<u8>,
    block: Vec<u8>,
}

impl<S> AuthorityFix<S> {
    pub(crate) fn new(inner: S) -> Self {
        AuthorityFix {
            inner,
            input: Vec::new(),
            output: Vec::new(),
            delivered: 0,
            preface_seen: false,
            pending: None,
        }
    }

    /// Moves every whole frame of `input` to `output`, rewritten.
    fn process(&mut self) {
        if !self.preface_seen {
            if self.input.len() < PREFACE.len() {
                return;
            }
            self.preface_seen = true;
            self.output.extend(self.input.drain(..PREFACE.len()));
        }
        while self.input.len() >= FRAME_HEADER {
            let length = u32::from_be_bytes([0, self.input[0], self.input[1], self.input[2]]);
            let end = FRAME_HEADER + length as usize;
            if self.input.len() < end {
                return;
            }
            let frame: Vec<u8> = self.input.drain(..end).collect();
            self.frame(&frame);
        }
    }

    fn frame(&mut self, frame: &[u8]) {
        let (kind, flags) = (frame[3], frame[4]);
        let stream = [frame[5], frame[6], frame[7], frame[8]];
        let payload = &frame[FRAME_HEADER..];
        match kind {
            HEADERS => {
                let Some((priority, fragment)) = split_headers(flags, payload) else {
                    return self.output.extend_from_slice(frame);
                };
                let pending = Pending {
                    stream,
                    flags: flags & !PADDED,
                    priority: priority.to_vec(),
                    block: fragment.to_vec(),
                };
                if flags & END_HEADERS != 0 {
                    self.emit(pending);
                } else {
                    self.pending = Some(pending);
                }
            }
            CONTINUATION if self.pending.is_some() => {
                let mut pending = self.pending.take().expect("pending");
                pending.block.extend_from_slice(payload);
                if flags & END_HEADERS != 0 {
                    self.emit(pending);
                } else {
                    self.pending = Some(pending);
                }
            }
            _ => self.output.extend_from_slice(frame),
        }
    }

    /// The header block, rewritten, as a HEADERS frame and as many
    /// CONTINUATION frames as the size limit needs.
    fn emit(&mut self, pending: Pending) {
        let block = rewrite(&pending.block).unwrap_or(pending.block);
        let mut payload = pending.priority;
        payload.extend_from_slice(&block);
        let mut chunks: Vec<&[u8]> = payload.chunks(MAX_FRAME).collect();
        if chunks.is_empty() {
            // An empty block still needs its one frame.
            chunks.push(&[]);
        }
        let last = chunks.len() - 1;
        for (i, bytes) in chunks.into_iter().enumerate() {
            // END_STREAM and PRIORITY belong to the HEADERS frame only.
            let (kind, mut flags) = match i {
                0 => (HEADERS, pending.flags & !END_HEADERS),
                _ => (CONTINUATION, 0),
            };
            if i == last {
                flags |= END_HEADERS;
            }
            let length = (bytes.len() as u32).to_be_bytes();
            self.output.extend_from_slice(&length[1..]);
            self.output.push(kind);
            self.output.push(flags);
            self.output.extend_from_slice(&pending.stream);
            self.output.extend_from_slice(bytes);
        }
    }
}

/// A HEADERS payload's priority fields and fragment, its padding dropped
/// (RFC 9113 §6.2); `None` when the lengths do not add up.
fn split_headers(flags: u8, payload: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut rest = payload;
    let mut padding = 0;
    if flags & PADDED != 0 {
        padding = *rest.first()? as usize;
        rest = &rest[1..];
    }
    let priority_len = if flags & PRIORITY != 0 { 5 } else { 0 };
    if rest.len() < priority_len + padding {
        return None;
    }
    let (priority, rest) = rest.split_at(priority_len);
    Some((priority, &rest[..rest.len() - padding]))
}

/// The header block with each literal `:authority` that is no valid
/// authority made one; `None` when nothing changed or the block cannot be
/// read here (it then goes as it came).
fn rewrite(block: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(block.len() + 64);
    let mut changed = false;
    let mut at = 0;
    while at < block.len() {
        let first = block[at];
        let start = at;
        if first & 0x80 != 0 {
            // Indexed field (§6.1).
            integer(block, &mut at, 7)?;
        } else if first & 0xe0 == 0x20 {
            // Dynamic table size update (§6.3).
            integer(block, &mut at, 5)?;
        } else {
            // A literal (§6.2): with incremental indexing (01), without
            // (0000) or never indexed (0001).
            let prefix = if first & 0x40 != 0 { 6 } else { 4 };
            let name = integer(block, &mut at, prefix)?;
            if name == 0 {
                string(block, &mut at)?;
            }
            let value_at = at;
            let value = string(block, &mut at)?;
            if name == AUTHORITY {
                if let Some(fixed) = valid_authority(&value) {
                    out.extend_from_slice(&block[start..value_at]);
                    plain_string(&fixed, &mut out);
                    changed = true;
                    continue;
                }
            }
        }
        out.extend_from_slice(&block[start..at]);
    }
    changed.then_some(out)
}

/// `value` with every character an authority may not hold as `-`, or
/// `None` when it is valid as it is.
fn valid_authority(value: &[u8]) -> Option<Vec<u8>> {
    let allowed = |c: &u8| c.is_ascii_alphanumeric() || b"._~-".contains(c);
    if value.iter().all(|c| allowed(c) || *c == b':') {
        return None;
    }
    Some(
        value
            .iter()
            .map(|c| if allowed(c) { *c } else { b'-' })
            .collect(),
    )
}

/// An HPACK integer with an `n`-bit prefix at `*at` (RFC 7541 §5.1).
fn integer(block: &[u8], at: &mut usize, n: u32) -> Option<u64> {
    let max = (1u64 << n) - 1;
    let mut value = u64::from(*block.get(*at)?) & max;
    *at += 1;
    if value < max {
        return Some(value);
    }
    let mut shift = 0;
    loop {
        let byte = *block.get(*at)?;
        *at += 1;
        value += u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
        shift += 7;
        if shift > 28 {
            return None;
        }
    }
}

fn write_integer(value: u64, n: u32, high_bits: u8, out: &mut Vec<u8>) {
    let max = (1u64 << n) - 1;
    if value < max {
        out.push(high_bits | value as u8);
        return;
    }
    out.push(high_bits | max as u8);
    let mut rest = value - max;
    while rest >= 0x80 {
        out.push((rest as u8 & 0x7f) | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}

/// An HPACK string at `*at` (§5.2), Huffman-decoded when it is encoded.
fn string(block: &[u8], at: &mut usize) -> Option<Vec<u8>> {
    let huffman = *block.get(*at)? & 0x80 != 0;
    let length = integer(block, at, 7)? as usize;
    let bytes = block.get(*at..*at + length)?;
    *at += length;
    if huffman {
        huffman::decode(bytes)
    } else {
        Some(bytes.to_vec())
    }
}

fn plain_string(value: &[u8], out: &mut Vec<u8>) {
    write_integer(value.len() as u64, 7, 0, out);
    out.extend_from_slice(value);
}

/// HPACK's Huffman code (RFC 7541 Appendix B) for the symbols of up to 8
/// bits: every character of a socket path or host name. The code is
/// canonical (codes of one length are consecutive, in symbol order, each
/// length starting at the next code after the shorter ones, shifted), so
/// each length's symbols give their codes. A longer code is not decoded
/// here: such a string is left as it came.
mod huffman {
    /// The symbols of each code length, 5 to 8 bits, in symbol order.
    const BY_LENGTH: [(u32, &[u8]); 4] = [
        (5, b"012aceiost"),
        (6, b" %-./3456789=A_bdfghlmnpru"),
        (7, b":BCDEFGHIJKLMNOPQRSTUVWYjkqvwxyz"),
        (8, b"&*,;XZ"),
    ];

    /// (code, length) of every symbol with a code of 8 bits or fewer.
    fn codes() -> Vec<(u32, u32, u8)> {
        let mut codes = Vec::new();
        let mut next = 0u32;
        let mut previous = BY_LENGTH[0].0;
        for (length, symbols) in BY_LENGTH {
            next <<= length - previous;
            previous = length;
            for &symbol in symbols {
                codes.push((next, length, symbol));
                next += 1;
            }
        }
        codes
    }

    pub(super) fn decode(bytes: &[u8]) -> Option<Vec<u8>> {
        let codes = codes();
        let mut out = Vec::new();
        let (mut bits, mut count) = (0u32, 0u32);
        for &byte in bytes {
            bits = (bits << 8) | u32::from(byte);
            count += 8;
            'symbols: while count >= 5 {
                for length in 5..=8.min(count) {
                    let code = (bits >> (count - length)) & ((1 << length) - 1);
                    if let Some(&(_, _, symbol)) =
                        codes.iter().find(|(c, l, _)| *l == length && *c == code)
                    {
                        out.push(symbol);
                        count -= length;
                        bits &= (1u32 << count).wrapping_sub(1);
                        continue 'symbols;
                    }
                }
                if count >= 8 {
                    // A code longer than 8 bits.
                    return None;
                }
                break;
            }
        }
        // What is left must be the EOS code's leading ones (§5.2), under 8 bits.
        (count < 8 && bits == (1u32 << count) - 1).then_some(out)
    }

    #[cfg(test)]
    pub(super) fn encode(text: &[u8]) -> Vec<u8> {
        let codes = codes();
        let (mut bits, mut count, mut out) = (0u64, 0u32, Vec::new());
        for c in text {
            let &(code, length, _) = codes.iter().find(|(_, _, s)| s == c).expect("coded");
            bits = (bits << length) | u64::from(code);
            count += length;
            while count >= 8 {
                out.push((bits >> (count - 8)) as u8);
                count -= 8;
            }
        }
        if count > 0 {
            out.push(((bits << (8 - count)) | ((1 << (8 - count)) - 1)) as u8);
        }
        out
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for AuthorityFix<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.delivered < this.output.len() {
                let n = buf.remaining().min(this.output.len() - this.delivered);
                buf.put_slice(&this.output[this.delivered..this.delivered + n]);
                this.delivered += n;
                if this.delivered == this.output.len() {
                    this.output.clear();
                    this.delivered = 0;
                }
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 8192];
            let mut read = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                // End of stream: what never made a whole frame goes as it is.
                this.output.append(&mut this.input);
                if this.output.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            this.input.extend_from_slice(read.filled());
            this.process();
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AuthorityFix<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7541 C.4.1: "www.example.com" with the Huffman code.
    #[test]
    fn the_rfcs_huffman_example_decodes() {
        let coded = [
            0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
        ];
        assert_eq!(huffman::decode(&coded).unwrap(), b"www.example.com");
        assert_eq!(huffman::encode(b"www.example.com"), coded);
        // RFC 7541 C.4.2: "no-cache".
        assert_eq!(
            huffman::decode(&[0xa8, 0xeb, 0x10, 0x64, 0x9c, 0xbf]).unwrap(),
            b"no-cache"
        );
    }

    fn headers_frame(flags: u8, block: &[u8]) -> Vec<u8> {
        let mut frame = (block.len() as u32).to_be_bytes()[1..].to_vec();
        frame.extend([HEADERS, flags, 0, 0, 0, 1]);
        frame.extend_from_slice(block);
        frame
    }

    /// What grpc-go sends for kubelet 1.20's first call: `:method POST`
    /// (indexed), `:authority` the socket path (literal with incremental
    /// indexing, Huffman), `:path` (literal without indexing, plain).
    #[test]
    fn a_socket_path_authority_keeps_its_length_and_the_rest_its_bytes() {
        let path = b"/var/lib/kubelet/device-plugins/plexus-test-plexus.test-netdev.sock";
        let coded = huffman::encode(path);
        let mut block = vec![0x83, 0x41];
        write_integer(coded.len() as u64, 7, 0x80, &mut block);
        block.extend(&coded);
        let tail = [0x04, 0x03, b'/', b'x', b'y'];
        block.extend(tail);

        let mut fix = AuthorityFix::new(());
        fix.input = PREFACE.to_vec();
        fix.input.extend(headers_frame(END_HEADERS | 0x1, &block));
        let settings = [0, 0, 0, 0x4, 0, 0, 0, 0, 0];
        fix.input.extend(settings);
        fix.process();

        let fixed = b"-var-lib-kubelet-device-plugins-plexus-test-plexus.test-netdev.sock";
        let mut want_block = vec![0x83, 0x41, fixed.len() as u8];
        want_block.extend(fixed);
        want_block.extend(tail);
        let mut want = PREFACE.to_vec();
        want.extend(headers_frame(END_HEADERS | 0x1, &want_block));
        want.extend(settings);
        assert_eq!(fix.output, want);
        assert!(fix.input.is_empty());
    }

    #[test]
    fn continuations_are_merged_and_valid_authorities_left_alone() {
        // `localhost` is valid: nothing changes, but the block arrives in
        // two frames and leaves in one.
        let mut block = vec![0x41];
        let coded = huffman::encode(b"localhost");
        write_integer(coded.len() as u64, 7, 0x80, &mut block);
        block.extend(&coded);
        let mut fix = AuthorityFix::new(());
        fix.preface_seen = true;
        fix.input = headers_frame(0, &block[..3]);
        let mut continuation = ((block.len() - 3) as u32).to_be_bytes()[1..].to_vec();
        continuation.extend([CONTINUATION, END_HEADERS, 0, 0, 0, 1]);
        continuation.extend(&block[3..]);
        fix.input.extend(continuation);
        fix.process();
        assert_eq!(fix.output, headers_frame(END_HEADERS, &block));
        assert_eq!(rewrite(&block), None);
    }
}
