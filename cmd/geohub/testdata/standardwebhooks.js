// Verifies deliveries with the npm package standardwebhooks, as a CAD
// vendor's receiver would. Reads a JSON array of {segredo, corpo, cabecalhos}
// on stdin and writes one line per delivery: "ok" or the library's error.
'use strict';
const { Webhook } = require('standardwebhooks');

let input = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (chunk) => { input += chunk; });
process.stdin.on('end', () => {
  for (const d of JSON.parse(input)) {
    try {
      new Webhook(d.segredo).verify(d.corpo, d.cabecalhos);
      console.log('ok');
    } catch (err) {
      console.log(String(err && err.message || err).replace(/\n/g, ' ') || 'error');
    }
  }
});
