# ruff: noqa: E501 (templates are kept as their authors wrote them)
"""Chat templates the rollout and the trainers render tau_env conversations with.

Both print tool calls in the hermes style, ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``,
which :func:`tau_env.reference_trainers.rollout.parse_generation` reads back.

- :data:`QWEN_TOOLS_TEMPLATE`: Qwen2.5's template (tools in the system turn, a model's calls in
  ``<tool_call>`` blocks, consecutive tool results grouped into one ``user`` turn of
  ``<tool_response>`` blocks), for Qwen-style tokenizers (``<|im_start|>``/``<|im_end|>``).
- :data:`SMOLLM2_TOOLS_TEMPLATE`: SmolLM2-Instruct's ChatML with tools, the template the end-to-end
  test serves SmolLM2-135M-Instruct with through vLLM (``tests/e2e/smollm2_tools.jinja``): SmolLM2's
  own template ignores tools and tool messages.
"""

from __future__ import annotations

QWEN_TOOLS_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + (message.content or '') + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {%- if tool_call.arguments is string %}
                {{- tool_call.arguments }}
            {%- else %}
                {{- tool_call.arguments | tojson }}
            {%- endif %}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

SMOLLM2_TOOLS_TEMPLATE = r"""{%- if messages and messages[0]['role'] == 'system' -%}
  {%- set system_message = messages[0]['content'] -%}
  {%- set loop_messages = messages[1:] -%}
{%- else -%}
  {%- set system_message = "You are a helpful assistant." -%}
  {%- set loop_messages = messages -%}
{%- endif -%}
{{- '<|im_start|>system\n' + system_message }}
{%- if tools %}
{{- "\n\nYou can call these functions; their signatures are in <tools></tools>:\n<tools>\n" }}
{%- for tool in tools %}
{{- (tool | tojson) + "\n" }}
{%- endfor %}
{{- "</tools>\n\nTo call a function, reply with only a JSON object inside <tool_call></tool_call> tags:\n<tool_call>\n{\"name\": \"function_name\", \"arguments\": {\"arg\": \"value\"}}\n</tool_call>" }}
{%- endif %}
{{- '<|im_end|>\n' }}
{%- for message in loop_messages %}
  {%- if message['role'] == 'assistant' and message.get('tool_calls') %}
    {{- '<|im_start|>assistant\n' }}
    {%- if message['content'] %}{{- message['content'] + '\n' }}{%- endif %}
    {%- for tc in message['tool_calls'] %}
      {{- '<tool_call>\n{"name": "' + tc['function']['name'] + '", "arguments": ' + (tc['function']['arguments'] if tc['function']['arguments'] is string else (tc['function']['arguments'] | tojson)) + '}\n</tool_call>\n' }}
    {%- endfor %}
    {{- '<|im_end|>\n' }}
  {%- elif message['role'] == 'tool' %}
    {{- '<|im_start|>user\n<tool_response>\n' + message['content'] + '\n</tool_response><|im_end|>\n' }}
  {%- else %}
    {{- '<|im_start|>' + message['role'] + '\n' + (message['content'] or '') + '<|im_end|>\n' }}
  {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
  {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

#: The templates by tokenizer family (the ``family`` argument of the rollout's policies).
TEMPLATES = {"qwen": QWEN_TOOLS_TEMPLATE, "smollm2": SMOLLM2_TOOLS_TEMPLATE}
