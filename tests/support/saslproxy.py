#!/usr/bin/env python3
"""A Kafka endpoint that enforces SASL, in front of a plaintext broker that has none.

Every connection must authenticate first: the proxy answers SaslHandshake (17) and
SaslAuthenticate (36) itself, for PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802,
server side, checking the client's proof) against one user, and passes ApiVersions
(18) through to the broker so the client sees the broker's versions. Any other
request before authentication closes the connection, as a broker with a SASL
listener does. Once authenticated, bytes are piped both ways unchanged, so the
broker must advertise this proxy's address. With --cert/--key the listener speaks
TLS, giving a SASL_SSL endpoint.

Prints "listening" once it accepts, then one line per authentication outcome.

usage: saslproxy.py --port P --upstream HOST:PORT --user NAME --password-file F
                    [--cert PEM --key PEM]
"""

import argparse
import base64
import hashlib
import hmac
import os
import socket
import ssl
import struct
import sys
import threading

MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
HASHES = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
ITERATIONS = 4096
SASL_AUTHENTICATION_FAILED = 58
UNSUPPORTED_SASL_MECHANISM = 33


def log(text):
    print(f"saslproxy: {text}", flush=True)


def recv_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def read_frame(sock):
    (n,) = struct.unpack(">i", recv_exact(sock, 4))
    if not 0 <= n <= 1 << 20:
        raise EOFError
    return recv_exact(sock, n)


def send_frame(sock, payload):
    sock.sendall(struct.pack(">i", len(payload)) + payload)


def read_uvarint(data, at):
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def uvarint(value):
    out = b""
    while True:
        low, value = value & 0x7F, value >> 7
        if not value:
            return out + bytes([low])
        out += bytes([low | 0x80])


def body_start(frame, flexible):
    """Correlation id and where the request body starts (header v1 or v2)."""
    (correlation,) = struct.unpack(">i", frame[4:8])
    (client_len,) = struct.unpack(">h", frame[8:10])
    at = 10 + max(client_len, 0)
    if flexible:
        tags, at = read_uvarint(frame, at)
        for _ in range(tags):
            _, at = read_uvarint(frame, at)
            size, at = read_uvarint(frame, at)
            at += size
    return correlation, at


class Scram:
    """The server side of one SCRAM exchange."""

    def __init__(self, mechanism, user, password):
        self.hash = HASHES[mechanism]
        self.user = user
        self.salt = os.urandom(16)
        salted = hashlib.pbkdf2_hmac(
            self.hash().name, password.encode(), self.salt, ITERATIONS
        )
        self.stored_key = self.hash(self.mac(salted, b"Client Key")).digest()
        self.server_key = self.mac(salted, b"Server Key")
        self.nonce = None
        self.auth_message = None

    def mac(self, key, text):
        return hmac.new(key, text, self.hash).digest()

    def first(self, message):
        """client-first -> server-first; None when malformed or another user."""
        parts = message.split(",", 2)
        if len(parts) != 3:
            return None
        bare = parts[2]
        fields = dict(f.split("=", 1) for f in bare.split(",") if "=" in f)
        if fields.get("n") != self.user or "r" not in fields:
            return None
        self.nonce = fields["r"] + base64.b64encode(os.urandom(18)).decode()
        server_first = "r={},s={},i={}".format(
            self.nonce, base64.b64encode(self.salt).decode(), ITERATIONS
        )
        self.auth_message = bare + "," + server_first
        return server_first

    def final(self, message):
        """client-final -> server-final; None unless the proof is right."""
        without_proof, _, proof = message.rpartition(",p=")
        fields = dict(f.split("=", 1) for f in without_proof.split(",") if "=" in f)
        if fields.get("r") != self.nonce or not proof:
            return None
        auth = (self.auth_message + "," + without_proof).encode()
        signature = self.mac(self.stored_key, auth)
        try:
            proof_bytes = base64.b64decode(proof, validate=True)
        except ValueError:
            return None
        if len(proof_bytes) != len(signature):
            return None
        client_key = bytes(a ^ b for a, b in zip(proof_bytes, signature))
        if not hmac.compare_digest(self.hash(client_key).digest(), self.stored_key):
            return None
        return "v=" + base64.b64encode(self.mac(self.server_key, auth)).decode()


def authenticate_response(version, correlation, error, message, token):
    if version >= 2:
        text = b"\0" if message is None else uvarint(len(message) + 1) + message.encode()
        return (
            struct.pack(">ib", correlation, 0)
            + struct.pack(">h", error)
            + text
            + uvarint(len(token) + 1)
            + token
            + struct.pack(">q", 0)
            + b"\0"
        )
    text = struct.pack(">h", -1) if message is None else struct.pack(">h", len(message)) + message.encode()
    body = struct.pack(">ih", correlation, error) + text + struct.pack(">i", len(token)) + token
    if version >= 1:
        body += struct.pack(">q", 0)
    return body


def authenticate(client, upstream, user, password):
    """Runs the SASL exchange; the mechanism when it succeeded, else None."""
    mechanism = scram = None
    while True:
        frame = read_frame(client)
        key, version = struct.unpack(">hh", frame[:4])
        if key == 18:
            send_frame(upstream, frame)
            send_frame(client, read_frame(upstream))
        elif key == 17:
            correlation, at = body_start(frame, False)
            (size,) = struct.unpack(">h", frame[at : at + 2])
            mechanism = frame[at + 2 : at + 2 + size].decode(errors="replace")
            error = 0 if mechanism in MECHANISMS else UNSUPPORTED_SASL_MECHANISM
            names = b"".join(struct.pack(">h", len(m)) + m.encode() for m in MECHANISMS)
            send_frame(client, struct.pack(">ihi", correlation, error, len(MECHANISMS)) + names)
            if error:
                log(f"refused mechanism {mechanism}")
                return None
            if mechanism in HASHES:
                scram = Scram(mechanism, user, password)
        elif key == 36 and mechanism:
            flexible = version >= 2
            correlation, at = body_start(frame, flexible)
            if flexible:
                size, at = read_uvarint(frame, at)
                size -= 1
            else:
                (size,) = struct.unpack(">i", frame[at : at + 4])
                at += 4
            token = frame[at : at + size]
            reply, done = None, False
            if mechanism == "PLAIN":
                parts = token.split(b"\0")
                if len(parts) == 3 and parts[1] == user.encode() and parts[2] == password.encode():
                    reply, done = b"", True
            elif scram.nonce is None:
                first = scram.first(token.decode(errors="replace"))
                reply = None if first is None else first.encode()
            else:
                final = scram.final(token.decode(errors="replace"))
                reply, done = (None, False) if final is None else (final.encode(), True)
            if reply is None:
                text = f"Authentication failed: invalid credentials with SASL mechanism {mechanism}"
                send_frame(client, authenticate_response(version, correlation, SASL_AUTHENTICATION_FAILED, text, b""))
                log(f"refused {mechanism}")
                return None
            send_frame(client, authenticate_response(version, correlation, 0, None, reply))
            if done:
                return mechanism
        else:
            log(f"refused api key {key} before authentication")
            return None


def pipe(source, sink):
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    for sock in (source, sink):
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def serve(client, args, password, tls):
    upstream = None
    try:
        if tls:
            client = tls.wrap_socket(client, server_side=True)
        host, port = args.upstream.rsplit(":", 1)
        upstream = socket.create_connection((host, int(port)))
        mechanism = authenticate(client, upstream, args.user, password)
        if mechanism is None:
            return
        log(f"authenticated {args.user} with {mechanism}")
        back = threading.Thread(target=pipe, args=(upstream, client), daemon=True)
        back.start()
        pipe(client, upstream)
        back.join()
    except (EOFError, OSError, ValueError, IndexError, struct.error) as error:
        if isinstance(error, ssl.SSLError):
            log(f"tls handshake failed: {error}")
    finally:
        for sock in (client, upstream):
            if sock is not None:
                try:
                    sock.close()
                except OSError:
                    pass


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--user", required=True)
    parser.add_argument("--password-file", required=True)
    parser.add_argument("--cert")
    parser.add_argument("--key")
    args = parser.parse_args()
    with open(args.password_file, encoding="utf-8") as f:
        password = f.read().rstrip("\n")
    tls = None
    if args.cert:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(args.cert, args.key)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", args.port))
    except OSError as error:
        sys.exit(f"saslproxy: cannot listen on {args.port}: {error}")
    listener.listen(64)
    log("listening")
    while True:
        client, _ = listener.accept()
        threading.Thread(target=serve, args=(client, args, password, tls), daemon=True).start()


if __name__ == "__main__":
    main()
