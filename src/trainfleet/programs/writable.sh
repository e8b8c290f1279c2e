#!/bin/sh
# writable.sh FOLDER: whether the account running it could make FOLDER or write in it.
# Prints "writable PATH", "not-writable PATH" or "not-a-folder PATH", PATH being the nearest
# part of FOLDER that this account can see exists: run as a job's account, it reveals
# nothing of folders that account cannot search itself.
path=$1
while [ ! -e "$path" ] && [ "$path" != / ] && [ "$path" != . ]; do
    path=$(dirname -- "$path")
done
if [ ! -d "$path" ]; then
    echo "not-a-folder $path"
elif [ -w "$path" ] && [ -x "$path" ]; then
    echo "writable $path"
else
    echo "not-writable $path"
fi
