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
// Patches, applied in memory at load (the installed package is never edited;
// if an anchor is not found the server refuses to start), each a place where
// s3rver 4.0.4 differs from S3 in a way a correct client meets:
//  - the signed path of a bucket request: s3rver rebuilds it from the route's
//    parameters, so "GET /bucket/?list-type=2" is checked as if signed over
//    "/bucket" and a request signed the way S3, curl's CURLOPT_AWS_SIGV4 and s3fs
//    sign it gets 403 SignatureDoesNotMatch; the trailing '/' is kept now;
//  - "Range: bytes=0-0" was served as "bytes=0-" (an end of 0 read as none);
//  - If-Match on GET and HEAD was ignored; a different ETag is now 412
//    PreconditionFailed, as on S3;
//  - keys with & < > were escaped twice in XML listings.
// Run node with --openssl-legacy-provider (s3fixture.py does): ListObjectsV2
// continuation tokens are DES, which OpenSSL 3 keeps in its legacy provider.
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
const lib = path.dirname(main);

const PATCHES = {
  'middleware/authentication.js': [
    [
      `      if (ctx.params.key) {
        canonicalizedResource += '/' + ctx.params.key;
      }`,
      `      if (ctx.params.key) {
        canonicalizedResource += '/' + ctx.params.key;
      } else if (!ctx.state.vhost && ctx.path.endsWith('/')) {
        canonicalizedResource += '/'; // stoker: S3 signs "/bucket/" as sent
      }`,
    ],
  ],
  'controllers/object.js': [
    ['    if (end) options.end = Number(end);', "    if (end !== undefined && end !== '') options.end = Number(end);"],
    [
      `  const noneMatch = ctx.headers['if-none-match'];`,
      `  const ifMatch = ctx.headers['if-match'];
  if (ifMatch && ifMatch !== '*' && ifMatch !== object.metadata.etag) {
    if (object.content) object.content.destroy();
    throw new S3Error('PreconditionFailed', 'At least one of the pre-conditions you specified did not hold', {
      Condition: 'If-Match',
    });
  }
  const noneMatch = ctx.headers['if-none-match'];`,
    ],
  ],
  'stores/filesystem.js': [
    [
      '        end: Math.min((options && options.end) || Infinity, lastByte),',
      '        end: Math.min(options && options.end !== undefined ? options.end : Infinity, lastByte),',
    ],
    [
      '        if (options && (options.start !== undefined || options.end)) {\n          object.range = range;\n        }\n        return object;\n      }',
      '        if (options && (options.start !== undefined || options.end !== undefined)) {\n          object.range = range;\n        }\n        return object;\n      }',
    ],
  ],
  's3rver.js': [["        attributesGroupName: '@',", "        attributesGroupName: '@',\n        processEntities: false,"]],
};

const patched = new Map();
for (const [rel, edits] of Object.entries(PATCHES)) {
  const file = path.join(lib, rel);
  let src = fs.readFileSync(file, 'utf8');
  for (const [anchor, text] of edits) {
    if (!src.includes(anchor)) {
      process.stderr.write(`start.js: ${file} is not the s3rver 4.0.4 these patches are for\n`);
      process.exit(3);
    }
    src = src.replace(anchor, text);
  }
  patched.set(file, src);
}
// Node compiles every CommonJS file through Module.prototype._compile: the
// patched files are served from memory whichever module requires them first.
const compile = Module.prototype._compile;
Module.prototype._compile = function (content, filename) {
  return compile.call(this, patched.has(filename) ? patched.get(filename) : content, filename);
};

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
