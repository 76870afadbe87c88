"""A Telegram Bot API simulator: a real HTTP server for tests, benchmarks and demos.

Everything that talks to Telegram is tested against this server instead, so
it is only useful if it is as strict as Telegram on the points the storage
layer depends on (see the reference notes on the Bot API):

- a file_id works only for the bot that received it; forwardMessage gives
  another bot a file_id of its own for the same file;
- uploads over 50 MB get 413, getFile over 20 MB gets "file is too big";
- two calls at once on one token (any method) get 429 with a long
  retry_after, and so does a bot sending more than its per-minute budget into
  one chat (`sends_per_minute`, counted per (bot, chat) as Telegram does:
  about 20 a minute into one channel);
- it holds several chats, each numbering its own messages from 1; every post
  (sent or forwarded) is logged with its bot, chat and time (`posts`), so a
  test can count posts per (bot, chat) window;
- a call whose body arrived whole is carried out even if its client gives up
  while waiting for the answer, and counts as in flight until it is done (an
  upload abandoned by a timeout still posts its message); a client that drops
  the connection before its body is complete stores nothing;
- revoked tokens get 401 and bots kicked from the chat get 403; a bot
  demoted to a plain member (`demote`) gets Telegram's 400s for posts and
  deletions there, and one whose administrator rights are taken one by one
  (`restrict`) gets the 400s of what it lost: pinning takes
  `can_edit_messages` (td `DialogManager.cpp`), as does editing another
  bot's caption or one older than two days (td `MessagesManager.cpp`);
- file paths expire, and bots can delete a message for 48 hours from its
  posting only (td `MessagesManager.cpp`; `advance_clock` moves time on);
- with `upload_spacing`, one bot's uploads of the same total size over
  100,000 bytes are spaced and refused with 429 "retry after 60" once 5 s
  ahead, as telegram-bot-api's `Client.cpp` (`on_cmd`) does;
- the file endpoint honours one `Range: bytes=...` (206 and Content-Range;
  416 past the end), as the static-file server behind api.telegram.org/file
  does (`honour_range=False` is a server that ignores Range);
- files are kept in memory, unless `keep_file_bytes=False`
  (`telegram-sim --discard-file-bytes`): for benches that never read back,
  an upload is answered as always and only its size is kept.

On top of that it can misbehave on purpose: added latency, limited bandwidth,
random 5xx, random 429 and connections that drop halfway through a response.
Random faults strike sendDocument, getFile, deleteMessage, forwardMessage and
downloads (never getMe/getChatMember); `fault_download_drop_rate` drops file
downloads only. A 429 or 5xx replaces the work; a drop comes after it, so a
dropped sendDocument leaves a message the client never heard of, as a lost
response from Telegram would. Tests can also hold every call of a method at
the moment Telegram would do the work (`hold`/`release`, or `holding` around
a `with` block; over HTTP: POST /_sim/hold/{method} and /_sim/release/{method},
GET /_sim/hold/{method} counts the calls waiting), to act while such a call is
in flight, as long as needed.

For crash and leak tests: each faultable method may have fault rates of its
own (`method_fault_rates`, `set_method_faults`); `kill` (POST /_sim/kill)
drops the connection of every call and download in flight at once, as a
network failure would (bodies Telegram had whole are still carried out); and
`stored_messages` (GET /_sim/messages) lists the messages each chat still
holds, to count them against what the service references.

For durability tests, Telegram can lose what it stores, as it shows it:
`lose_chat` (the chat deleted, or the bots banned for good) answers every
call naming the chat with 400 "chat not found", and its files go with it
unless another chat holds them too: getFile says "wrong file_id or the file
is temporarily unavailable" and paths already issued get 404
(`files_outlive_lost_chats` keeps them instead). `take_down` removes one
message's file on Telegram's side, and so every message holding that file (a
forward or a re-send by file_id is the same file, not a copy): getFile with
any bot's file_id for it fails as above, issued paths get 404, and
forwardMessage and deleteMessage of those messages say "message to forward
not found" and "message to delete not found". `corrupt` flips one byte of
a stored file: downloads answer 200 with the right size and the wrong bytes,
which only a check of the content catches. `stored_files` gives the bytes of
every message ever posted (deleted and lost ones too), for checks that
nothing readable reached Telegram. Over HTTP, for a simulator in another
process: POST /_sim/chats/{chat_id}/lose, POST
/_sim/messages/{chat_id}/{message_id}/take-down and .../corrupt[?offset=N]
(answers the offset), GET /_sim/files (every file: chat, message, size,
whether Telegram still has it) and GET /_sim/files/{chat_id}/{message_id}
(its bytes). The demo's simulator (`persistent`, for --data-dir) journals
these too, so a loss outlives a restart.

The package has three layers: `SimulatorConfig` (the knobs, in `config`),
`TelegramSimulator` (in `state`: hooks for tests, on top of the in-flight
bookkeeping, `CallBookkeeping` in `bookkeeping`, on top of Telegram's rules,
`TelegramRules` in `rules`; its records in
`model`, what Telegram lost in `losses`; synchronous so that every
check-and-update is atomic on the event loop) and the Starlette app built by
`create_simulator_app` (in `http`: HTTP parsing, pacing, faults, in-flight
accounting; request bodies in `bodies`, the Range header in `ranges`).
`server` runs it, inside a host's event loop or standalone.
"""

from app.telegram.simulator.config import (
    MB,
    MUTABLE_KNOBS,
    MiB,
    SimulatorConfig,
    make_tokens,
)
from app.telegram.simulator.http import create_simulator_app
from app.telegram.simulator.model import ApiError, BotStats, Post, SimulatedDrop
from app.telegram.simulator.server import main_simulator, run_simulator
from app.telegram.simulator.state import TelegramSimulator

__all__ = [
    "MB",
    "MUTABLE_KNOBS",
    "ApiError",
    "BotStats",
    "MiB",
    "Post",
    "SimulatedDrop",
    "SimulatorConfig",
    "TelegramSimulator",
    "create_simulator_app",
    "main_simulator",
    "make_tokens",
    "run_simulator",
]
