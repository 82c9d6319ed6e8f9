// What the tests share: the fake daemon's socket, which the Go test
// (go test ./clients) serves over a fake manager and passes in
// CELLVM_TEST_FAKE_SOCKET. Without it the tests that need a daemon skip.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { CellvmError, Sandbox } from '../src/index.js';

export const SOCKET = process.env.CELLVM_TEST_FAKE_SOCKET ?? '';
export const FORBIDDEN_SOCKET = process.env.CELLVM_TEST_FORBIDDEN_SOCKET ?? '';
export const needsDaemon = SOCKET ? {} : { skip: "needs the fake daemon: run 'go test ./clients' (it serves one)" };

/** Waits until the daemon has ended the sandbox's cell (it notices a closed connection a moment after the client). */
export async function waitIdle(sbx, ms = 30_000) {
  const deadline = Date.now() + ms;
  while ((await sbx.info()).cellRunning) {
    if (Date.now() > deadline) throw new Error(`the cell of ${sbx.sandboxId} still runs ${ms} ms after its client left`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * Runs fn with a function that creates sandboxes on the fake daemon (its
 * options added to the socket's), then kills every sandbox it made.
 */
export async function withSandboxes(fn) {
  const made = [];
  const create = async (o = {}) => {
    const sbx = await Sandbox.create({ socketPath: SOCKET, ...o });
    made.push(sbx);
    return sbx;
  };
  try {
    return await fn(create);
  } finally {
    for (const sbx of made) await sbx.kill();
  }
}

/**
 * For tests of input a client refuses before any request: nowhere's
 * socket does not exist, so a request would be a ConnectError, and
 * fromClient(cls, pattern) matches an error of cls that is not the
 * daemon's (no CellvmError) and whose message matches pattern.
 */
export const nowhere = { socketPath: path.join(os.tmpdir(), `cellvm-js-nowhere-${process.pid}-${Date.now()}`, 'none.sock') }; // never created: nothing to leave behind
export const fromClient = (cls, pattern) => (e) => e instanceof cls && !(e instanceof CellvmError) && (!pattern || pattern.test(e.message));

/** Workspace and image names the daemon's rule (1 to 64 of a-z, 0-9, '-', '_' and '.', starting with a letter or digit) refuses, and some it takes. */
export const BAD_NAMES = ['', '-a', '_a', '.a', '..', 'A', 'Notes', 'a/b', '../x', 'a b', 'a\n', 'é', 'a'.repeat(65)];
export const GOOD_NAMES = ['a', '0', 'a'.repeat(64), 'my-ws_1.2', '9.-_'];
