// A Runtime-style interpreter loop in JS; only the import is cellvm's. It
// prints one JSON line per cell for the Go test to check.
import { Sandbox } from 'cellvm/compat/withruntime'; // was: the Runtime SDK's Sandbox

const CELLS = [
  ['text', "x = 6 * 7\nprint('x is', x)", 30_000],
  // The first matplotlib cell of a cold sandbox imports matplotlib and
  // draws: in the nested-KVM rig that alone took 31 s once, past a
  // Runtime-style loop's 30 s. Until the snapshots issue's template (the
  // data stack already imported) brings it under budget, it gets five minutes.
  ['chart', 'import matplotlib.pyplot as plt\nplt.bar([1, 2, 3], [3, 1, 2])', 300_000],
  ['error', "{}['missing']", 30_000],
  ['timeout', 'import time\nwhile True:\n    time.sleep(0.05)', 2_000],
  ['after', 'print(x + 1)', 30_000],
  ['env', "import os\nprint(os.environ.get('CELLVM_GREETING'))", 30_000],
];

const sbx = await Sandbox.create({ memoryMiB: 2048, network: { internet: false }, env: { CELLVM_GREETING: 'hello from the host' } });
try {
  for (const [name, code, timeoutMs] of CELLS) {
    const out = await sbx.interpreter.run(code, { timeoutMs });
    let png = new Uint8Array();
    for (const r of out.results) if (r.refs['image/png']) png = sbx.interpreter.result(r.refs['image/png']);
    console.log(JSON.stringify({
      cell: name, status: out.status, stdout: out.stdout, error: out.error, state_kept: out.stateKept,
      png_bytes: png.length, png_magic: Buffer.from(png.subarray(0, 8)).toString('hex'),
    }));
  }
} finally {
  await sbx.close();
}
