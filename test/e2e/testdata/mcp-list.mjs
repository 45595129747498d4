// Lists every workspace through list_workspaces with the official TypeScript SDK's client (the
// one the MCP Inspector uses), page by page, and prints what it saw as one JSON line. Checks that
// each answer's text block is the same JSON as its structured content.
//
// Usage: node mcp-list.mjs SDK_DIR URL TOKEN LIMIT   (SDK_DIR: the @modelcontextprotocol/sdk package)
import { pathToFileURL } from "node:url";
import { isDeepStrictEqual } from "node:util";

const [sdkDir, url, token, limit] = process.argv.slice(2);
const { Client } = await import(pathToFileURL(`${sdkDir}/dist/esm/client/index.js`).href);
const { StreamableHTTPClientTransport } = await import(pathToFileURL(`${sdkDir}/dist/esm/client/streamableHttp.js`).href);

const contentTypes = []; // of the answers to tools/call
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
  fetch: async (input, init) => {
    const res = await fetch(input, init);
    if (typeof init?.body === "string" && init.body.includes('"tools/call"')) {
      contentTypes.push(res.headers.get("content-type"));
    }
    return res;
  },
});
const client = new Client({ name: "nogoo9-e2e", version: "1" });
await client.connect(transport);

const ids = [];
let pages = 0;
const args = { allUsers: true, limit: Number(limit) };
for (;;) {
  const res = await client.callTool({ name: "list_workspaces", arguments: args });
  if (res.isError) throw new Error(`list_workspaces: ${JSON.stringify(res.content)}`);
  const text = JSON.parse(res.content[0].text);
  if (!isDeepStrictEqual(text, res.structuredContent)) throw new Error("the text block is not the structured content");
  pages++;
  for (const w of res.structuredContent.workspaces) ids.push(w.id);
  if (!res.structuredContent.continue) break;
  if (pages > 100) throw new Error("more than 100 pages");
  args.continue = res.structuredContent.continue;
}
console.log(JSON.stringify({ ids, pages, contentTypes, protocolVersion: transport.protocolVersion }));
await client.close();
