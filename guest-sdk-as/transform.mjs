// A compiler transform that gives the exports their ABI names.
//
// AssemblyScript cannot export a name with a hyphen: `export { onAlarm as
// "on-alarm" }` is a parse error (TS1003) and @external is refused on an
// exported function (AS212). This transform runs after compilation, on the
// Binaryen module, and renames the function exports onAlarm, onRequest and
// onInit to on-alarm, on-request and on-init, before the binary is written.
// The host then sees the ABI's names and checks their signatures at load.
//
// asc ... --transform ./transform.mjs (asconfig.json names it).
import { Transform } from "assemblyscript/transform";

export const renames = { onAlarm: "on-alarm", onRequest: "on-request", onInit: "on-init" };

export default class WasmkeepExports extends Transform {
  afterCompile(module) {
    const binaryen = this.binaryen;
    for (const [from, to] of Object.entries(renames)) {
      const ref = module.getExport(from);
      if (!ref) continue;
      const info = binaryen.getExportInfo(ref);
      if (info.kind !== binaryen.ExternalFunction) {
        throw new Error(`wasmkeep: export ${from} is not a function`);
      }
      module.removeExport(from);
      module.addFunctionExport(info.value, to);
    }
  }
}
