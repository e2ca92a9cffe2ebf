/** Process entry of the `attnlab` command (bin/attnlab.js loads the compiled copy of this file). */
import { installProcessGuards } from './failure.js';
import { main } from './main.js';

installProcessGuards();
process.exitCode = await main(process.argv.slice(2));
