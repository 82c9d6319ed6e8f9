# A program written for BoxLite's CodeBox; only the import is cellvm's.
import asyncio

from cellvm.compat.boxlite import CodeBox  # was: from boxlite import CodeBox


async def main():
    async with CodeBox() as box:
        result = await box.run("import sys\nprint('hello from', 6 * 7, 'on Python', sys.version_info[0])")
        print(result)


asyncio.run(main())
