// Runs @modelcontextprotocol/server-everything's own Streamable HTTP transport
// (`dist/transports/streamableHttp.js`, what `mcp-server-everything streamableHttp`
// starts) unchanged, but bound to 127.0.0.1 on a free port instead of every
// interface on PORT, and announcing the address it got:
//
//   node everything-http.mjs PATH/TO/server-everything
//
// Prints `server-everything listening on http://127.0.0.1:PORT/mcp`.
import net from 'node:net';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const pkg = process.argv[2];
if (!pkg) {
  console.error('usage: node everything-http.mjs <server-everything package directory>');
  process.exit(2);
}

// express's app.listen(PORT, cb) ends in net.Server.prototype.listen(port, cb): give it
// a host. Only the first server listens here.
const listen = net.Server.prototype.listen;
let announced = false;
net.Server.prototype.listen = function (...args) {
  if (!announced) {
    announced = true;
    if (typeof args[1] !== 'string') args.splice(1, 0, '127.0.0.1');
    args[0] = 0;
    this.once('listening', () => {
      console.log(`server-everything listening on http://127.0.0.1:${this.address().port}/mcp`);
    });
  }
  return listen.apply(this, args);
};
process.env.PORT = '0';
await import(pathToFileURL(path.join(pkg, 'dist/transports/streamableHttp.js')).href);
