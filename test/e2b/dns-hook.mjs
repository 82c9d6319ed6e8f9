// A wildcard name for the test domain, for node (which has no hosts
// wildcard): with E2B_TEST_RESOLVE="DOMAIN=ADDRESS" set, every name under
// DOMAIN (and DOMAIN itself) resolves to ADDRESS; any other name resolves
// as usual. Load it with `node --import ./dns-hook.mjs`. It replaces
// dns.lookup, which net and tls (and so undici's fetch, which the E2B SDK
// uses) call for every connection.
import dns from 'node:dns'

const spec = process.env.E2B_TEST_RESOLVE ?? ''
const [domain, address] = spec.split('=')
if (domain && address) {
  const family = address.includes(':') ? 6 : 4
  const original = dns.lookup
  dns.lookup = function lookup(hostname, options, callback) {
    if (typeof options === 'function') {
      callback = options
      options = {}
    } else if (typeof options === 'number') {
      options = { family: options }
    }
    const name = String(hostname).toLowerCase().replace(/\.$/, '')
    if (name === domain || name.endsWith('.' + domain)) {
      if (options && options.all) {
        process.nextTick(callback, null, [{ address, family }])
      } else {
        process.nextTick(callback, null, address, family)
      }
      return {}
    }
    return original.call(this, hostname, options, callback)
  }
}
