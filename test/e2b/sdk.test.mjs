// E2B's own JS SDKs (e2b and @e2b/code-interpreter, pinned in
// package-lock.json), unchanged, against cellvm's E2B front end. It reads
// only what an E2B user sets: E2B_DOMAIN, E2B_API_KEY (and
// NODE_EXTRA_CA_CERTS for a test CA), plus, for the tests themselves:
//
//   E2B_TEST_OTHER_KEY  another tenant's API key (the auth checks)
//   E2B_TEST_SKIP       comma-separated parts to skip, with the reason in
//                       the runner's log: runCode, contexts, files,
//                       commands, pty, ports, pause (what the daemon or
//                       fake behind the front end cannot do yet)
//   E2B_TEST_NO_INTERNET=1  create sandboxes with allowInternetAccess
//                       false (a daemon without egress)
//   E2B_TEST_TIMEOUT_MS a longer request and code timeout (a nested rig's
//                       cold boots and imports are slow)
//
// Run: node --import ./dns-hook.mjs --test sdk.test.mjs (api/e2b's
// TestSDK and the rig's TestE2BSDK do).
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, NotFoundError, AuthenticationError, CommandExitError } from '@e2b/code-interpreter'

const skip = new Set((process.env.E2B_TEST_SKIP ?? '').split(',').map((s) => s.trim()).filter(Boolean))
const skipped = (part) => (skip.has(part) ? `${part}: skipped (E2B_TEST_SKIP)` : false)
const otherKey = process.env.E2B_TEST_OTHER_KEY
const slowMs = Number(process.env.E2B_TEST_TIMEOUT_MS || 0)
const slow = slowMs > 0 ? { requestTimeoutMs: slowMs } : {}
const slowCode = slowMs > 0 ? { requestTimeoutMs: slowMs, timeoutMs: slowMs } : {}
const createOpts = (o) => ({ ...o, ...slow, ...(process.env.E2B_TEST_NO_INTERNET ? { allowInternetAccess: false } : {}) })
const run = `${process.pid}-${Date.now()}`

let sbx

before(async () => {
  sbx = await Sandbox.create(createOpts({ timeoutMs: 120_000, metadata: { suite: 'cellvm-e2b', run } }))
})

after(async () => {
  if (sbx) await Sandbox.kill(sbx.sandboxId).catch(() => {})
})

test('create: an id, and getInfo shows its metadata', async () => {
  assert.match(sbx.sandboxId, /^sb-/)
  const info = await sbx.getInfo()
  assert.equal(info.sandboxId, sbx.sandboxId)
  assert.equal(info.metadata.run, run)
  assert.equal(info.state, 'running')
})

test('list: shows it with its metadata, filtered by metadata', async () => {
  const items = await Sandbox.list({ query: { metadata: { run } } }).nextItems()
  assert.deepEqual(items.map((s) => s.sandboxId), [sbx.sandboxId])
  assert.equal(items[0].metadata.suite, 'cellvm-e2b')
  const none = await Sandbox.list({ query: { metadata: { run: 'no-such-run' } } }).nextItems()
  assert.equal(none.length, 0)
})

test('setTimeout, then connect reaches the same sandbox', async () => {
  await sbx.setTimeout(300_000)
  const info = await sbx.getInfo()
  assert.ok(info.endAt.getTime() > Date.now() + 200_000, `endAt ${info.endAt.toISOString()} after setTimeout(300 s)`)
  const same = await Sandbox.connect(sbx.sandboxId, slow)
  assert.equal(same.sandboxId, sbx.sandboxId)
})

test('runCode: state kept, text, streaming, errors, a PNG', { skip: skipped('runCode') }, async () => {
  await sbx.runCode('x = 41', slowCode)
  const e = await sbx.runCode('x + 1', slowCode)
  assert.equal(e.text, '42')
  const out = []
  await sbx.runCode('print("streamed")', { ...slowCode, onStdout: (m) => out.push(m.line) })
  assert.ok(out.join('').includes('streamed'), `onStdout got ${JSON.stringify(out)}`)
  const bad = await sbx.runCode('1/0', slowCode)
  assert.equal(bad.error?.name, 'ZeroDivisionError')
  const fig = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()', slowCode)
  const png = fig.results.find((r) => r.png)?.png
  assert.ok(png, `no PNG result in ${JSON.stringify(fig.results.map((r) => Object.keys(r)))}`)
  assert.equal(Buffer.from(png, 'base64').subarray(1, 4).toString(), 'PNG')
  const again = await Sandbox.connect(sbx.sandboxId, slow)
  assert.equal((await again.runCode('x', slowCode)).text, '41')
})

test('runCode in JavaScript, TypeScript and Bash: each its own session', { skip: skipped('runCode') }, async () => {
  await sbx.runCode('x = "python"', slowCode)
  await sbx.runCode('let x = 41', { ...slowCode, language: 'js' })
  assert.equal((await sbx.runCode('x + 1', { ...slowCode, language: 'js' })).text, '42')
  assert.equal((await sbx.runCode('await new Promise((r) => setTimeout(() => r(5), 10))', { ...slowCode, language: 'javascript' })).text, '5')
  const out = []
  await sbx.runCode('console.log("from node")', { ...slowCode, language: 'js', onStdout: (m) => out.push(m.line) })
  assert.ok(out.join('').includes('from node'), `onStdout got ${JSON.stringify(out)}`)
  const bad = await sbx.runCode("throw new TypeError('boom')", { ...slowCode, language: 'js' })
  assert.equal(bad.error?.name, 'TypeError')
  assert.equal(bad.error?.value, 'boom')
  assert.equal((await sbx.runCode('function f(n: number): number { return n * 2 }\nf(21)', { ...slowCode, language: 'ts' })).text, '42')
  const sh = await sbx.runCode('cd /tmp && V=7; echo $V; pwd', { ...slowCode, language: 'bash' })
  assert.equal(sh.logs.stdout.join(''), '7\n/tmp\n')
  assert.equal((await sbx.runCode('x', slowCode)).text, "'python'")
  await assert.rejects(sbx.runCode('1', { ...slowCode, language: 'cobol' }), /400/)
})

test('contexts: create, list, run in, restart, remove', { skip: skipped('contexts') }, async () => {
  const ctx = await sbx.createCodeContext({ language: 'python', cwd: '/tmp', ...slow })
  assert.equal(ctx.language, 'python')
  assert.equal(ctx.cwd, '/tmp')
  const js = await sbx.createCodeContext({ language: 'js', ...slow })
  assert.equal(js.language, 'javascript')
  const ids = (await sbx.listCodeContexts()).map((c) => c.id)
  assert.ok(ids.includes('default') && ids.includes(ctx.id) && ids.includes(js.id), `listCodeContexts: ${ids}`)
  if (!skipped('runCode')) {
    await sbx.runCode('x = 1', slowCode)
    await sbx.runCode('x = 2', { ...slowCode, context: ctx })
    assert.equal((await sbx.runCode('x', { ...slowCode, context: ctx })).text, '2')
    assert.equal((await sbx.runCode('x', slowCode)).text, '1')
    assert.equal((await sbx.runCode('import os; os.getcwd()', { ...slowCode, context: ctx })).text, "'/tmp'")
    await sbx.restartCodeContext(ctx)
    assert.equal((await sbx.runCode('x', { ...slowCode, context: ctx })).error?.name, 'NameError')
    assert.equal((await sbx.runCode('x', slowCode)).text, '1')
  } else {
    await sbx.restartCodeContext(ctx)
  }
  await sbx.removeCodeContext(js.id)
  await assert.rejects(sbx.restartCodeContext(js.id), NotFoundError)
  assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === js.id))
  await sbx.removeCodeContext(ctx)
})

test('files: write, read, list, watchDir', { skip: skipped('files') }, async () => {
  await sbx.files.makeDir('/home/user/watched')
  const events = []
  const handle = await sbx.files.watchDir('/home/user/watched', (ev) => events.push(ev))
  await sbx.files.write('/home/user/watched/e2b-test.txt', 'hello cellvm')
  assert.equal(await sbx.files.read('/home/user/watched/e2b-test.txt'), 'hello cellvm')
  const names = (await sbx.files.list('/home/user/watched')).map((e) => e.name)
  assert.ok(names.includes('e2b-test.txt'), `list: ${names}`)
  for (let i = 0; i < 50 && !events.some((ev) => ev.name.includes('e2b-test.txt')); i++) {
    await new Promise((r) => setTimeout(r, 100))
  }
  await handle.stop()
  assert.ok(events.some((ev) => ev.name.includes('e2b-test.txt')), `watchDir events: ${JSON.stringify(events)}`)
})

test('files and runCode: pandas reads what files.write wrote', { skip: skipped('files') || skipped('runCode') }, async () => {
  await sbx.files.write('/home/user/data.csv', 'a,b\n1,2\n3,4\n')
  const e = await sbx.runCode("import pandas as pd\nint(pd.read_csv('/home/user/data.csv')['b'].sum())", slowCode)
  assert.equal(e.text, '6')
})

test('pty: echo through a terminal', { skip: skipped('pty') }, async () => {
  let out = ''
  const dec = new TextDecoder()
  const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += dec.decode(d) } })
  await sbx.pty.sendInput(term.pid, new TextEncoder().encode('echo pty-$((40+2))\n'))
  for (let i = 0; i < 50 && !out.includes('pty-42'); i++) await new Promise((r) => setTimeout(r, 100))
  await term.kill()
  assert.ok(out.includes('pty-42'), `pty output: ${JSON.stringify(out)}`)
})

test('commands: output, exit codes, background kill', { skip: skipped('commands') }, async () => {
  const r = await sbx.commands.run('echo out; echo err >&2')
  assert.equal(r.stdout, 'out\n')
  assert.equal(r.stderr, 'err\n')
  assert.equal(r.exitCode, 0)
  await assert.rejects(sbx.commands.run('exit 3'), (err) => err instanceof CommandExitError && err.exitCode === 3)
  const bg = await sbx.commands.run('sleep 600', { background: true })
  assert.ok(bg.pid > 0)
  assert.ok((await sbx.commands.list()).some((p) => p.pid === bg.pid))
  assert.equal(await sbx.commands.kill(bg.pid), true)
})

test('ports: getHost(8000) reaches a server in the sandbox', { skip: skipped('ports') }, async () => {
  await sbx.commands.run('cd /tmp && python3 -m http.server 8000', { background: true })
  const url = `https://${sbx.getHost(8000)}/`
  const headers = { 'E2B-Traffic-Access-Token': sbx.trafficAccessToken }
  let res
  for (let i = 0; i < 50; i++) {
    res = await fetch(url, { headers })
    if (res.status === 200) break
    await new Promise((r) => setTimeout(r, 200))
  }
  assert.equal(res.status, 200)
  const without = await fetch(url)
  assert.equal(without.status, 401)
})

test('pause, then connect resumes with its variables', { skip: skipped('pause') }, async () => {
  if (!skip.has('runCode')) await sbx.runCode('kept = "yes"', slowCode)
  await sbx.pause(slow)
  assert.equal((await sbx.getInfo()).state, 'paused')
  const back = await Sandbox.connect(sbx.sandboxId, slow)
  assert.equal((await back.getInfo()).state, 'running')
  if (!skip.has('runCode')) assert.equal((await back.runCode('kept', slowCode)).text, "'yes'")
})

test('auth: a wrong key is AuthenticationError', async () => {
  await assert.rejects(Sandbox.list({ apiKey: 'wrong-key-0123456789abcdef' }).nextItems(), AuthenticationError)
  await assert.rejects(Sandbox.connect(sbx.sandboxId, { apiKey: 'wrong-key-0123456789abcdef' }), AuthenticationError)
})

test("auth: another tenant's key gets NotFoundError", { skip: otherKey ? false : 'no E2B_TEST_OTHER_KEY' }, async () => {
  await assert.rejects(Sandbox.connect(sbx.sandboxId, { apiKey: otherKey }), NotFoundError)
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId, { apiKey: otherKey }), NotFoundError)
  assert.equal(await Sandbox.kill(sbx.sandboxId, { apiKey: otherKey }), false)
  const theirs = await Sandbox.list({ apiKey: otherKey, query: { metadata: { run } } }).nextItems()
  assert.equal(theirs.length, 0)
})

test('kill, then connect throws NotFoundError', async () => {
  const id = sbx.sandboxId
  assert.equal(await Sandbox.kill(id), true)
  sbx = undefined
  await assert.rejects(Sandbox.connect(id), NotFoundError)
  assert.equal(await Sandbox.kill(id), false)
})
