// Errors raised by the cellvm client. Every error is a CellvmError; those
// the daemon answers with carry its code (err.code, e.g. "not_found"), the
// HTTP status and the daemon's message, and are thrown as the class for
// that code. A cell that raises, times out or loses its interpreter is not
// an error: it is a result (execution.error, execution.status).

export class CellvmError extends Error {
  constructor(message, { status, code } = {}) {
    super(message);
    this.name = new.target.name;
    this.code = code ?? new.target.code ?? 'error';
    this.status = status;
  }
}
CellvmError.code = 'error';

const define = (name, code) => {
  const cls = { [name]: class extends CellvmError {} }[name];
  cls.code = code;
  return cls;
};

/** 400: the request is malformed or out of bounds. */
export const Invalid = define('Invalid', 'invalid');
/** 401: a remote daemon (a URL) wants a valid bearer token (429 rate_limited: this address failed too often). */
export const Unauthorized = define('Unauthorized', 'unauthorized');
/** 403: the daemon refuses this user. */
export const Forbidden = define('Forbidden', 'forbidden');
/** 404: no such sandbox or snapshot, or no such file in the sandbox. */
export const NotFound = define('NotFound', 'not_found');
/** 409: a cell is already running (cells are not queued), the sandbox is not in the state the call needs (a pause of a paused sandbox, a resume of a running one), or a workspace is held by another sandbox. */
export const Busy = define('Busy', 'busy');
/** 410: the sandbox's VM died; it can only be killed. */
export const Lost = define('Lost', 'lost');
/** 413: a body or file is larger than the daemon allows. */
export const TooLarge = define('TooLarge', 'too_large');
/** 500: the daemon failed. */
export const Internal = define('Internal', 'internal');
/** 501: this daemon or host does not offer the operation. */
export const NotSupported = define('NotSupported', 'not_supported');
/** 503: the host's cap on sandboxes, memory or snapshot disk is reached (or its disk is full); retry after err.retryAfter seconds. */
export const Full = define('Full', 'full');
/** No daemon could be reached. */
export const ConnectError = define('ConnectError', 'connect');
/** The connection ended before the answer did. A cell may have run in part. */
export const ConnectionLost = define('ConnectionLost', 'connection_lost');
/** No complete answer within the call's timeout. */
export const Timeout = define('Timeout', 'timeout');
/** The daemon's answer was not what the API promises. */
export const ProtocolError = define('ProtocolError', 'protocol');

const byCode = Object.fromEntries(
  [Invalid, Unauthorized, Forbidden, NotFound, Busy, Lost, TooLarge, Internal, NotSupported, Full].map((c) => [c.code, c]),
);
byCode.rate_limited = Unauthorized;
const byStatus = { 400: Invalid, 401: Unauthorized, 429: Unauthorized, 403: Forbidden, 404: NotFound, 405: Invalid, 409: Busy, 410: Lost, 413: TooLarge, 500: Internal, 501: NotSupported, 503: Full };

/** The error for a non-success answer: by the code in its JSON body, else by its status. */
export function fromResponse(status, body, retryAfter) {
  let code;
  let message = Buffer.from(body).toString('utf8').trim().slice(0, 4096);
  try {
    const doc = JSON.parse(message);
    if (doc && typeof doc.error === 'object' && typeof doc.error.code === 'string') {
      code = doc.error.code;
      message = String(doc.error.message ?? '');
    }
  } catch {
    // not JSON: keep the text
  }
  const cls = byCode[code] ?? byStatus[status] ?? (status >= 400 && status < 500 ? Invalid : Internal);
  const err = new cls(message || `HTTP ${status}`, { status, code: code ?? cls.code });
  if (cls === Full) {
    const s = Number(retryAfter);
    err.retryAfter = retryAfter && Number.isFinite(s) ? s : undefined;
  }
  return err;
}
