// An unchanged E2B program: it runs against E2B's cloud or a cellvm
// daemon started with --e2b-domain, depending only on E2B_DOMAIN and
// E2B_API_KEY (and NODE_EXTRA_CA_CERTS for cellvm's self-signed
// certificate). Install the SDK with `npm install @e2b/code-interpreter`.
import { Sandbox } from '@e2b/code-interpreter'

const sbx = await Sandbox.create({ timeoutMs: 600_000, metadata: { example: 'e2b' } })
try {
  await sbx.runCode('x = 41')
  console.log('x + 1 =', (await sbx.runCode('x + 1')).text)

  await sbx.files.write('/home/user/data.csv', 'a,b\n1,2\n3,4\n')
  const df = await sbx.runCode("import pandas as pd\npd.read_csv('/home/user/data.csv').sum().to_dict()")
  console.log('sums:', df.text)

  const r = await sbx.commands.run('wc -l /home/user/data.csv')
  console.log('wc:', r.stdout.trim())
} finally {
  await sbx.kill()
}
