// The S3 test server of stoker's remote tests and bench/remote: @20minutes/s3rver
// 4.0.4 (package.json here), which checks SigV4 signatures and serves range GETs.
//
//   node start.js --port PORT --dir DATADIR [--bucket NAME]... [--modules DIR]
//
// Listens on 127.0.0.1:PORT (0: a free port), keeps objects under DATADIR,
// creates the buckets, then prints one line "ready PORT" on stdout. Credentials:
// access key S3RVER, secret S3RVER, any region; path-style addressing. Ends on
// SIGTERM/SIGINT. --modules names the node_modules folder that holds the package
// (scripts/setup-deps installs it; default: Node's own resolution).
//
// One patch, applied in memory at load (the installed package is never
// edited): s3rver rebuilds the signed path of a bucket request from the route's
// parameters, so "GET /bucket/?list-type=2" is checked as if signed over
// "/bucket" and a request signed the way real S3 (and curl's CURLOPT_AWS_SIGV4,
// and s3fs) signs it gets 403 SignatureDoesNotMatch. The patch keeps the
// trailing '/' of a bucket-only path in the canonical URI, as S3 does; both
// forms then verify. If the anchor text is not found the server refuses to start.
'use strict';

const Module = require('module');
const fs = require('fs');
const path = require('path');

function usage(msg) {
  process.stderr.write(`start.js: ${msg}\nusage: node start.js --port PORT --dir DATADIR [--bucket NAME]... [--modules DIR]\n`);
  process.exit(2);
}

const opts = { port: null, dir: null, buckets: [], modules: null };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const a = argv[i];
  const v = argv[i + 1];
  if (v === undefined) usage(`${a} needs a value`);
  if (a === '--port') opts.port = Number(v);
  else if (a === '--dir') opts.dir = v;
  else if (a === '--bucket') opts.buckets.push(v);
  else if (a === '--modules') opts.modules = v;
  else usage(`unknown argument ${a}`);
  i++;
}
if (!Number.isInteger(opts.port) || opts.port < 0 || opts.port > 65535) usage('--port needs 0..65535');
if (!opts.dir) usage('--dir is required');

const paths = opts.modules ? [opts.modules] : undefined;
const main = require.resolve('@20minutes/s3rver', paths ? { paths } : undefined);
const authFile = path.join(path.dirname(main), 'middleware', 'authentication.js');

const ANCHOR = `      if (ctx.params.key) {
        canonicalizedResource += '/' + ctx.params.key;
      }`;
const PATCHED = `      if (ctx.params.key) {
        canonicalizedResource += '/' + ctx.params.key;
      } else if (!ctx.state.vhost && ctx.path.endsWith('/')) {
        canonicalizedResource += '/'; // stoker: S3 signs "/bucket/" as sent
      }`;
const src = fs.readFileSync(authFile, 'utf8');
if (!src.includes(ANCHOR)) {
  process.stderr.write(`start.js: ${authFile} is not the s3rver 4.0.4 this patch is for\n`);
  process.exit(3);
}
const mod = new Module(authFile, module);
mod.filename = authFile;
mod.paths = Module._nodeModulePaths(path.dirname(authFile));
mod._compile(src.replace(ANCHOR, PATCHED), authFile);
mod.loaded = true;
require.cache[authFile] = mod;

const S3rver = require(main);
fs.mkdirSync(opts.dir, { recursive: true });
const server = new S3rver({
  port: opts.port,
  address: '127.0.0.1',
  directory: opts.dir,
  silent: true,
  configureBuckets: opts.buckets.map((name) => ({ name })),
});
server.run().then(
  (addr) => process.stdout.write(`ready ${addr.port}\n`),
  (err) => {
    process.stderr.write(`start.js: ${err.message}\n`);
    process.exit(1);
  },
);
const stop = () => server.close().finally(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
