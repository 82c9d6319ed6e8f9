// Where the daemon is, and one request to it. The daemon is reached over
// its Unix socket, or, given a URL, over TLS to `cellvm serve --listen`
// with a bearer token (HTTP/1.1, one connection per call). In this order:
// the socket path or URL given, $CELLVM_URL, $CELLVM_SOCKET,
// /run/cellvm/cellvm.sock. The token is the one given, else $CELLVM_TOKEN,
// else the first token line of $CELLVM_TOKEN_FILE; the certificate to
// trust is caFile, else $CELLVM_TLS_CA, else the system's.

import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import tls from 'node:tls';
import { ConnectError, ConnectionLost, ProtocolError, Timeout, fromResponse } from './errors.js';

export const DEFAULT_SOCKET = '/run/cellvm/cellvm.sock';
export const SOCKET_ENV = 'CELLVM_SOCKET';
export const URL_ENV = 'CELLVM_URL';
export const TOKEN_ENV = 'CELLVM_TOKEN';
export const TOKEN_FILE_ENV = 'CELLVM_TOKEN_FILE';
export const CA_ENV = 'CELLVM_TLS_CA';
/** The timeout of calls that have no timeout of their own (ms). */
export const DEFAULT_TIMEOUT_MS = 30_000;
/** Bounds on what the client keeps of an answer. */
export const MAX_JSON_BYTES = 64 << 20;
export const MAX_EVENT_LINE_BYTES = 64 << 20;
/** How long an upload waits for the daemon's go-ahead before sending anyway. */
const EXPECT_CONTINUE_MS = 2000;

export class Connection {
  /**
   * @param {{socketPath?: string, url?: string, token?: string, caFile?: string, timeoutMs?: number}} [opts]
   */
  constructor({ socketPath, url, token, caFile, timeoutMs = DEFAULT_TIMEOUT_MS } = {}) {
    if (!(timeoutMs > 0)) throw new RangeError('timeoutMs must be positive');
    if (socketPath && url) throw new TypeError('give socketPath or url, not both');
    this.timeoutMs = timeoutMs;
    const u = socketPath ? undefined : url || process.env[URL_ENV] || undefined;
    if (u) {
      this.#remote(u, token, caFile);
      return;
    }
    const p = socketPath || process.env[SOCKET_ENV] || DEFAULT_SOCKET;
    if (p.includes('\0')) throw new TypeError('the socket path contains a NUL byte');
    this.socketPath = p;
  }

  #token = '';

  #remote(url, token, caFile) {
    let u;
    try {
      u = new URL(url);
    } catch {
      throw new TypeError(`daemon URL ${JSON.stringify(url)} is not a URL`);
    }
    if (u.protocol !== 'https:') {
      throw new TypeError(`daemon URL ${JSON.stringify(url)}: want https://HOST:PORT (plain http would send the token in clear)`);
    }
    if ((u.pathname !== '/' && u.pathname !== '') || u.search || u.username) {
      throw new TypeError(`daemon URL ${JSON.stringify(url)}: want https://HOST:PORT, with no path, query or user`);
    }
    this.url = `https://${u.host}`;
    this.host = u.hostname.replace(/^\[|\]$/g, '');
    this.port = Number(u.port || 443);
    const t = token ?? (process.env[TOKEN_ENV] || tokenFromFile(process.env[TOKEN_FILE_ENV]));
    if (/[\r\n\0]/.test(t)) throw new TypeError('the token contains a line break or NUL');
    this.#token = t;
    const ca = caFile || process.env[CA_ENV];
    this.ca = ca ? fs.readFileSync(ca) : undefined;
  }

  /** Where the daemon is, for messages (never the token). */
  toString() {
    return this.url ?? this.socketPath;
  }

  /** Headers sent with every request: the bearer token of a remote daemon. */
  headers() {
    return this.#token ? { Authorization: `Bearer ${this.#token}` } : {};
  }

  /** The node:http(s) options that say where to connect. */
  target() {
    if (this.url) {
      // SNI carries names only; an address is checked against the certificate's IP SANs.
      const servername = net.isIP(this.host) ? undefined : this.host;
      // The certificate is checked against the URL's host, not the Host
      // header the API is sent with.
      const checkServerIdentity = (_, cert) => tls.checkServerIdentity(this.host, cert);
      return { transport: https, options: { host: this.host, port: this.port, servername, ca: this.ca, checkServerIdentity } };
    }
    return { transport: http, options: { socketPath: this.socketPath } };
  }

  connectError(err) {
    if (this.url) {
      if (/CERT|SELF_SIGNED|UNABLE_TO_VERIFY/.test(err.code ?? '')) {
        return new ConnectError(`the cellvm daemon at ${this.url} has a certificate this client does not trust (${err.message}); pass caFile or set ${CA_ENV}`);
      }
      return new ConnectError(`cannot connect to the cellvm daemon at ${this.url}: ${err.message}`);
    }
    const p = this.socketPath;
    const hint = `start one with 'cellvm serve' or set ${SOCKET_ENV}`;
    switch (err.code) {
      case 'ENOENT':
        return new ConnectError(`no cellvm daemon at ${p}: the socket does not exist (${hint})`);
      case 'ECONNREFUSED':
        return new ConnectError(`no cellvm daemon listens at ${p}: the socket is stale (${hint})`);
      case 'EACCES':
      case 'EPERM':
        return new ConnectError(`cannot connect to the cellvm daemon at ${p}: permission denied (the socket belongs to the daemon's user)`);
      default:
        return new ConnectError(`cannot connect to the cellvm daemon at ${p}: ${err.message}`);
    }
  }

  /**
   * Sends one request and hands the response to handle, which resolves to
   * the call's value. The whole exchange, handle included, must finish
   * within timeoutMs; otherwise the connection is closed and Timeout thrown.
   * @param {{method: string, path: string, headers?: object, body?: Uint8Array|import('node:stream').Readable|null,
   *          length?: number|null, timeoutMs: number, handle: (res: http.IncomingMessage) => Promise<any>}} r
   */
  request({ method, path, headers = {}, body = null, length = null, timeoutMs, handle }) {
    const what = `${method} ${path.split('?')[0]}`;
    return new Promise((resolve, reject) => {
      let settled = false;
      let connected = false;
      const finish = (err, value) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        clearTimeout(continueTimer);
        req.destroy();
        if (err) reject(err);
        else resolve(value);
      };
      const timer = setTimeout(
        () => finish(new Timeout(`${what}: no complete answer from the daemon within ${timeoutMs / 1000} s`, { code: 'timeout' })),
        timeoutMs,
      );
      const h = { Host: 'cellvm', 'User-Agent': 'cellvm-js/0.1', Connection: 'close', ...headers, ...this.headers() };
      if (body !== null) {
        if (length === null) h['Transfer-Encoding'] = 'chunked';
        else h['Content-Length'] = String(length);
      }
      const { transport, options } = this.target();
      const req = transport.request({ ...options, method, path, headers: h, agent: false, setHost: false });
      req.on('socket', (s) => s.on(this.url ? 'secureConnect' : 'connect', () => { connected = true; }));
      req.on('error', (err) => {
        if (!connected && (this.url || ['ENOENT', 'ECONNREFUSED', 'EACCES', 'EPERM', 'ENOTSOCK'].includes(err.code))) {
          finish(this.connectError(err));
        } else {
          finish(new ConnectionLost(`${what}: ${err.message}`));
        }
      });
      req.on('response', (res) => {
        Promise.resolve()
          .then(() => handle(res))
          .then((v) => finish(null, v), (e) => finish(e));
      });
      let continueTimer;
      let sending = false;
      let responded = false;
      req.on('response', () => { responded = true; });
      const sendBody = () => {
        clearTimeout(continueTimer);
        if (sending || settled) return;
        sending = true;
        writeBody(req, body, () => responded || settled).catch((e) => finish(e));
      };
      if (body === null) {
        req.end();
      } else if (h.Expect === '100-continue') {
        // Wait for the go-ahead: a refusal (unknown sandbox, bad path,
        // too large) then costs no transfer.
        req.flushHeaders();
        req.on('continue', sendBody);
        continueTimer = setTimeout(sendBody, EXPECT_CONTINUE_MS);
      } else {
        sendBody();
      }
    });
  }
}

/** Upload bodies go in pieces of this size. */
const PIECE_BYTES = 64 << 10;

/** The pieces of a body: a Uint8Array's slices, or a stream's chunks. */
async function* pieces(body) {
  if (body instanceof Uint8Array) {
    for (let i = 0; i < body.length; i += PIECE_BYTES) yield body.subarray(i, i + PIECE_BYTES);
    return;
  }
  for await (const chunk of body) {
    if (typeof chunk === 'string') throw new TypeError('files.write: the stream gives strings; give it bytes');
    for (let i = 0; i < chunk.length; i += PIECE_BYTES) yield chunk.subarray(i, i + PIECE_BYTES);
  }
}

/**
 * Writes a request body piece by piece, letting the event loop read the
 * connection between pieces, and stops once the daemon has answered: a
 * daemon that refuses a body midway (too large) answers and then closes,
 * and a write after that close would fail (EPIPE) before its answer is read.
 */
async function writeBody(req, body, answered) {
  for await (const piece of pieces(body)) {
    await new Promise((r) => setImmediate(r));
    if (answered()) return;
    if (!req.write(piece)) {
      await new Promise((r) => { req.once('drain', r); req.once('close', r); });
    }
  }
  if (!answered()) req.end();
}

/** Reads a whole body, at most limit bytes; a cut-off body is ConnectionLost. */
export async function readBody(res, limit, what = 'the answer') {
  const parts = [];
  let n = 0;
  try {
    for await (const chunk of res) {
      n += chunk.length;
      if (n > limit) throw new ProtocolError(`${what} is larger than the client's limit of ${limit} bytes`);
      parts.push(chunk);
    }
  } catch (e) {
    if (e instanceof ProtocolError) throw e;
    throw new ConnectionLost(`the connection ended in the middle of ${what} (${e.message})`);
  }
  if (!res.complete) throw new ConnectionLost(`the connection ended in the middle of ${what}`);
  return Buffer.concat(parts);
}

/** Reads the answer: the API error for a status not in want, else the JSON (null when empty). */
export async function answer(res, want) {
  const data = await readBody(res, MAX_JSON_BYTES);
  if (!want.includes(res.statusCode)) throw fromResponse(res.statusCode, data, res.headers['retry-after']);
  const text = data.toString('utf8');
  if (!text.trim()) return null;
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new ProtocolError(`the answer is not JSON: ${e.message}`);
  }
}

/** One request with an optional JSON body, answered with JSON (or nothing). */
export function jsonCall(conn, method, path, payload, { want = [200], timeoutMs } = {}) {
  const body = payload === undefined ? null : Buffer.from(JSON.stringify(payload));
  const headers = { Accept: 'application/json' };
  if (body) headers['Content-Type'] = 'application/json';
  return conn.request({
    method, path, headers, body, length: body ? body.length : null,
    timeoutMs: timeoutMs ?? conn.timeoutMs, handle: (res) => answer(res, want),
  });
}

/** The path of a sandbox's route, each segment escaped. */
export function sandboxPath(id, ...rest) {
  if (typeof id !== 'string' || !id) throw new TypeError('a sandbox id is a non-empty string');
  return ['/v1/sandboxes', encodeURIComponent(id), ...rest.map(encodeURIComponent)].join('/');
}

/** The route of a snapshot (the id is checked by the caller). */
export function snapshotPath(id) {
  return `/v1/snapshots/${encodeURIComponent(id)}`;
}

/** The route of a workspace (the name is checked by the caller). */
export function workspacePath(name) {
  return `/v1/workspaces/${encodeURIComponent(name)}`;
}

/** The route of an image (the name is checked by the caller). */
export function imagePath(name) {
  return `/v1/images/${encodeURIComponent(name)}`;
}

/** The files route of a guest path; a relative path is under /workspace. */
export function filesPath(id, guestPath) {
  if (typeof guestPath !== 'string' || !guestPath) throw new TypeError('a file path is a non-empty string');
  const abs = guestPath.startsWith('/') ? guestPath : `/workspace/${guestPath}`;
  const segs = abs.split('/').filter(Boolean);
  if (!segs.length) throw new RangeError(`${JSON.stringify(guestPath)} names the root directory, not a file`);
  return sandboxPath(id, 'files', ...segs);
}

/** The first token line of a token file (blank lines and # comments skipped, as the daemon reads it). */
function tokenFromFile(path) {
  if (!path) return '';
  for (const line of fs.readFileSync(path, 'utf8').split('\n')) {
    const t = line.trim();
    if (t && !t.startsWith('#')) return t;
  }
  throw new TypeError(`token file ${path} holds no token`);
}
