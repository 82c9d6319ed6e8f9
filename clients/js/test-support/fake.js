// What the tests share: the fake daemon's socket, which the Go test
// (go test ./clients) serves over a fake manager and passes in
// CELLVM_TEST_FAKE_SOCKET. Without it the tests that need a daemon skip.

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
