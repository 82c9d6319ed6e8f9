import { Execution } from './models.js';
import { Sandbox } from './sandbox.js';

export const TOOL_NAME: string;
export const INPUT_SCHEMA: Record<string, unknown>;
export const DEFAULT_TIMEOUT_S: number;
export const MAX_TIMEOUT_S: number;
export const MAX_CHARS: number;
export const TRACEBACK_LINES: number;
export const MAX_IMAGES: number;
export const MAX_IMAGE_BYTES: number;
export const MAX_CODE_BYTES: number;
/** What the model reads when approve refuses a cell. */
export const REFUSED: string;
/** true runs the code, false/null/undefined refuses, a string is the edited code to run. */
export type Approval = boolean | string | null | undefined;

export interface ToolSpec {
  name: string;
  description: string;
  input_schema: Record<string, unknown>;
}
export interface ToolOutput {
  text: string;
  images: { mime: string; data: Uint8Array }[];
  isError: boolean;
}
export function description(network?: string[], timeoutS?: number): string;
export function runPythonTool(opts?: { network?: string[]; timeoutS?: number }): ToolSpec;
export function anthropicTool(opts?: { network?: string[]; timeoutS?: number }): ToolSpec;
export function openaiTool(opts?: { network?: string[]; timeoutS?: number }): { type: 'function'; function: { name: string; description: string; parameters: Record<string, unknown> } };
export function stripANSI(s: string): string;
export function cutNote(cut: number): string;
export function clipMiddle(s: string, limit: number): [string, number];
export function formatExecution(execution: Execution | Record<string, unknown>): ToolOutput;
export function toolError(message: string): ToolOutput;
export function runToolCall(
  sbx: Sandbox,
  args: string | Record<string, unknown>,
  opts?: { approve?: (code: string) => Approval | Promise<Approval> },
): Promise<ToolOutput>;
export function anthropicToolResult(out: ToolOutput, toolUseId: string): Record<string, unknown>;
export function openaiToolMessages(results: { id: string; name: string; output: ToolOutput }[]): Record<string, unknown>[];
