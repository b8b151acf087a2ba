// Prints, as JSON, what the test needs from the installed suite's own definitions: each test's
// kind ("required" when the definition names none, as the suite's display counts it) and the
// published results files with their implementation's name and type.
import suites from 'http-cache-tests/tests/index.mjs'
import surrogate from 'http-cache-tests/tests/surrogate-control.mjs'
import published from 'http-cache-tests/results/index.mjs'

const kinds = {}
for (const suite of [...suites, surrogate]) {
  for (const test of suite.tests) kinds[test.id] = test.kind || 'required'
}
console.log(JSON.stringify({ kinds, published }))
