// Preloaded (node --import) into the suite's server: its bare listen(port) would listen on every
// interface; this binds 127.0.0.1 only, so the test's origin is reachable from this machine alone.
import net from 'node:net'

const listen = net.Server.prototype.listen
net.Server.prototype.listen = function (...args) {
  const bare = ['number', 'string'].includes(typeof args[0]) &&
    (args.length === 1 || typeof args[1] === 'function')
  return bare ? listen.call(this, Number(args[0]), '127.0.0.1', ...args.slice(1)) : listen.apply(this, args)
}
