// Preloaded (node --import) into the suite's client.
// Every name it looks up (the node's test domain in the base URL) is answered with 127.0.0.1, so
// no query leaves the machine.
// Its requests share at most 32 connections, as a browser limits its connections to one host: the
// client starts 100 tests at once, and the node forwards to one origin over at most 32 connections
// with 32 more requests waiting (docs/API.md, HTTP buckets); a burst of 100 first requests would
// otherwise be refused 502 "busy" in part, depending only on how the machine schedules the burst.
import dns from 'node:dns'
import http from 'node:http'

dns.lookup = function (host, options, callback) {
  if (typeof options === 'function') [callback, options] = [options, {}]
  if (options && typeof options === 'object' && options.all) {
    return process.nextTick(callback, null, [{ address: '127.0.0.1', family: 4 }])
  }
  return process.nextTick(callback, null, '127.0.0.1', 4)
}

http.globalAgent.maxSockets = 32
