// Preloaded (node --import) into the reference server the tests run over HTTP: whatever host
// it asks for, every TCP server it opens listens on 127.0.0.1 only, and says on stderr the
// address and port it got ("mercury-test listening <address> <port>"), so a port 0 works.
import net from "node:net";

const listen = net.Server.prototype.listen;

net.Server.prototype.listen = function (...args) {
  const first = args[0];
  const port =
    typeof first === "number" || (typeof first === "string" && /^\d+$/.test(first))
      ? Number(first)
      : typeof first === "object" && first !== null && "port" in first
        ? Number(first.port)
        : null;
  if (port === null) {
    return listen.apply(this, args);
  }
  const callback = args.find((arg) => typeof arg === "function");
  this.once("listening", () => {
    const { address, port: bound } = this.address();
    process.stderr.write(`mercury-test listening ${address} ${bound}\n`);
  });
  return listen.call(this, { port, host: "127.0.0.1" }, callback);
};
